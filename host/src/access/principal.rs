//! Who a client is, as the access policy sees it: the same shape whether a
//! tokens file names the client or an issuer's access token does.

use std::collections::BTreeSet;

/// The `issuer` of the clients a tokens file names.
pub const TOKENS_FILE_ISSUER: &str = "tokens-file";

/// Who is asking.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The token's `sub`; a tokens file's client name.
    pub subject: String,
    /// The OAuth client the token was issued to (`client_id`, else `azp`;
    /// empty if the token names none); a tokens file's client name.
    pub client_id: String,
    /// Who vouched for the client: the issuer, or [`TOKENS_FILE_ISSUER`].
    pub issuer: String,
    pub groups: BTreeSet<String>,
    pub scopes: BTreeSet<String>,
}

impl Principal {
    /// A client of the tokens file, by its name.
    pub fn of_tokens_file(name: &str, groups: BTreeSet<String>) -> Self {
        Self {
            subject: name.to_owned(),
            client_id: name.to_owned(),
            issuer: TOKENS_FILE_ISSUER.to_owned(),
            groups,
            scopes: BTreeSet::new(),
        }
    }
}
