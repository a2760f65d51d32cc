//! What an OAuth client needs to find its way in: the Protected Resource
//! Metadata (RFC 9728) at both well-known locations, the root one and the
//! one suffixed with the resource's path, and the `WWW-Authenticate`
//! challenge (RFC 6750) of a refused request: 401 for a missing or invalid
//! token, naming the metadata and the scopes to ask for; 403 with
//! `insufficient_scope` and every scope the request needs.

use std::sync::Arc;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;

use crate::access::{Refusal, ResourceServer};

/// The well-known path of RFC 9728.
const METADATA_PATH: &str = "/.well-known/oauth-protected-resource";

/// The metadata routes of `server`, answered without a token.
pub fn metadata_routes(server: &ResourceServer) -> axum::Router {
    let document = Arc::new(json!({
        "resource": server.resource(),
        "authorization_servers": [server.issuer()],
        "scopes_supported": server.scopes(),
        "bearer_methods_supported": ["header"],
        "resource_name": "resmux",
    }));
    let answer = move || {
        let document = document.clone();
        async move { axum::Json(document.as_ref().clone()) }
    };
    let mut routes = axum::Router::new().route(METADATA_PATH, get(answer.clone()));
    let suffixed = metadata_path(server);
    if suffixed != METADATA_PATH {
        routes = routes.route(&suffixed, get(answer));
    }
    routes
}

/// The metadata document's path for the resource's own path (RFC 9728 §3.1).
fn metadata_path(server: &ResourceServer) -> String {
    let path = server.resource_url().path().trim_end_matches('/');
    format!("{METADATA_PATH}{path}")
}

/// The URL of the metadata document, as challenges name it.
fn metadata_url(server: &ResourceServer) -> String {
    let mut url = server.resource_url().clone();
    url.set_path(&metadata_path(server));
    url.into()
}

/// How a refused request is answered; `oauth` is the resource server, if
/// the operator configured one.
pub fn refusal(oauth: Option<&ResourceServer>, why: Option<&Refusal>) -> Response {
    let mut challenge = vec![("realm", "resmux".to_owned())];
    let (status, message) = match why {
        None => (
            StatusCode::UNAUTHORIZED,
            "a bearer token is required".to_owned(),
        ),
        Some(Refusal::InvalidToken(reason)) => {
            challenge.push(("error", "invalid_token".to_owned()));
            challenge.push(("error_description", quotable(reason)));
            (
                StatusCode::UNAUTHORIZED,
                format!("the bearer token is not valid: {reason}"),
            )
        }
        Some(refusal @ Refusal::InsufficientScope { .. }) => {
            challenge.push(("error", "insufficient_scope".to_owned()));
            (StatusCode::FORBIDDEN, refusal.to_string())
        }
        // Not the client's fault, and no challenge: the same token may
        // pass once the issuer answers.
        Some(Refusal::IssuerUnavailable {
            reason,
            retry_after,
        }) => {
            let retry_after = retry_after.as_secs().max(1).to_string();
            let message = format!("the bearer token cannot be checked now: {reason}");
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                [(header::RETRY_AFTER, retry_after)],
                message,
            )
                .into_response();
        }
    };
    if let Some(server) = oauth {
        challenge.push(("resource_metadata", metadata_url(server)));
        // Never empty: the auth file must name a scope.
        challenge.push(("scope", server.scopes().join(" ")));
    }
    let value = challenge
        .iter()
        .map(|(name, value)| format!("{name}=\"{value}\""))
        .collect::<Vec<_>>()
        .join(", ");
    let value = HeaderValue::from_str(&format!("Bearer {value}"))
        .unwrap_or_else(|_| HeaderValue::from_static("Bearer realm=\"resmux\""));
    (status, [(header::WWW_AUTHENTICATE, value)], message).into_response()
}

/// `text` with only the characters RFC 6750 allows in a quoted value.
fn quotable(text: &str) -> String {
    text.chars()
        .map(|character| match character {
            '"' => '\'',
            '\\' => '/',
            ' '..='~' => character,
            _ => '?',
        })
        .collect()
}
