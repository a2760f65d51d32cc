//! From a verified token's claims to who is asking: the subject (`sub`, a
//! name RFC 9068 requires), the client (`client_id`, else `azp`), the scopes
//! (`scope` as RFC 9068 and RFC 8693 give it, or `scp` as a string or a
//! list) and the groups (the operator's groups claim, a list or a string).
//! A token whose `iss` is not one string is refused here: RFC 7519 makes it
//! one, and jsonwebtoken lets a list that holds the issuer through. Also the
//! words a refusal uses.

use std::collections::BTreeSet;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::errors::{Error, ErrorKind};
use serde_json::{Map, Value};

use crate::access::principal::Principal;

/// Who a verified token of `issuer` names: its subject from the first of
/// `subject_claims` it has, its groups from the claim `groups_claim`.
pub fn principal(
    claims: &Map<String, Value>,
    issuer: &str,
    groups_claim: &str,
    subject_claims: &[&str],
) -> Result<Principal, String> {
    if claims.get("iss").is_some_and(|iss| !iss.is_string()) {
        return Err("the token's \"iss\" claim is not a single string".to_owned());
    }
    let subject = match subject_claims.iter().find_map(|name| claims.get(*name)) {
        Some(Value::String(subject)) if !subject.is_empty() => subject.clone(),
        Some(_) => return Err("the token's \"sub\" claim is not a name".to_owned()),
        None => return Err("the token has no \"sub\" claim".to_owned()),
    };
    let client_id = ["client_id", "azp"]
        .iter()
        .find_map(|name| claims.get(*name).and_then(Value::as_str))
        .unwrap_or_default()
        .to_owned();
    let list = |names: &[&str], what: &str| {
        names
            .iter()
            .find_map(|name| claims.get(*name))
            .map(word_list)
            .transpose()
            .map_err(|()| format!("the token's {what} are neither a string nor a list of strings"))
            .map(Option::unwrap_or_default)
    };
    Ok(Principal {
        subject,
        client_id,
        issuer: issuer.to_owned(),
        groups: list(&[groups_claim], "groups")?,
        scopes: list(&["scope", "scp"], "scopes")?,
    })
}

/// Words as a space-separated string or a list of strings.
fn word_list(value: &Value) -> Result<BTreeSet<String>, ()> {
    match value {
        Value::String(text) => Ok(text.split_whitespace().map(str::to_owned).collect()),
        Value::Array(items) => items
            .iter()
            .map(|item| item.as_str().map(str::to_owned).ok_or(()))
            .collect(),
        _ => Err(()),
    }
}

/// Why a token's header does not parse: it is no JWT at all, or it names an
/// algorithm outside JWS's signatures (such as `none`).
pub fn unreadable_header(token: &str) -> String {
    let names_an_algorithm = token
        .split('.')
        .next()
        .and_then(|header| URL_SAFE_NO_PAD.decode(header).ok())
        .and_then(|header| serde_json::from_slice::<Map<String, Value>>(&header).ok())
        .is_some_and(|header| header.contains_key("alg"));
    if names_an_algorithm {
        "the token's header names no signature algorithm this server accepts".to_owned()
    } else {
        "the token is not a JWT".to_owned()
    }
}

/// What was wrong with a token, in words for the client and the log.
pub fn describe(error: &Error) -> String {
    match error.kind() {
        ErrorKind::ExpiredSignature => "the token has expired".to_owned(),
        ErrorKind::ImmatureSignature => "the token is not valid yet".to_owned(),
        ErrorKind::InvalidIssuer => "the token is from another issuer".to_owned(),
        ErrorKind::InvalidAudience => "the token is for another resource".to_owned(),
        ErrorKind::InvalidSignature => "the token's signature does not verify".to_owned(),
        ErrorKind::InvalidAlgorithm => "the token's algorithm does not match its key".to_owned(),
        ErrorKind::MissingRequiredClaim(claim) => format!("the token has no {claim:?} claim"),
        ErrorKind::InvalidClaimFormat(claim) => format!("the token's {claim:?} claim is malformed"),
        _ => format!("the token is malformed: {error}"),
    }
}
