//! Who is asking, and what they may do: the clients an operator names in a
//! tokens file, each with a bearer token (kept only as its SHA-256), the
//! schemes it may use and an optional rate limit on reads; the
//! clients an OAuth issuer vouches for ([`oauth`]); and the audit log of every
//! read ([`audit`]). The transport authenticates a request into a [`Client`]
//! of either kind; the protocol layer answers within the client's scope.
//!
//! ```toml
//! [clients.alice]
//! token = { from_env = "ALICE_TOKEN" }      # or { from_file = "..." }, or
//! # token_sha256 = "9f86d0…"                # the hex SHA-256 of the token
//! schemes = ["files", "notes"]              # or ["*"] for every scheme
//! reads_per_minute = 600                    # optional
//! ```

pub mod audit;
pub mod oauth;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use serde::Deserialize;
use sha2::{Digest, Sha256};

pub use self::oauth::{Refusal, ResourceServer};
use crate::namespace::Scope;

/// One client, as every request it makes is answered.
#[derive(Clone)]
pub struct Client {
    /// Unique among every client: a tokens file's name, or `oauth:` and the
    /// token's subject.
    pub name: Arc<str>,
    pub scope: Scope,
    reads: Option<Arc<ReadLimit>>,
}

struct ReadLimit {
    per_minute: NonZeroU32,
    limiter: DefaultDirectRateLimiter,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, out: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        out.debug_struct("Client")
            .field("name", &self.name)
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// The client of a server without access control: stdio, or HTTP
    /// without a tokens file. It may use every scheme.
    pub fn local() -> Self {
        Self {
            name: "local".into(),
            scope: Scope::All,
            reads: None,
        }
    }

    /// The client an OAuth token with this `subject` names. Until per-URI
    /// policies decide, it may use every scheme; the token's scopes let it in
    /// at all.
    pub fn from_oauth(subject: &str) -> Self {
        Self {
            name: format!("oauth:{subject}").into(),
            scope: Scope::All,
            reads: None,
        }
    }

    /// Takes one read from the client's rate limit, or says when to retry.
    pub fn admit_read(&self) -> Result<(), String> {
        let Some(limit) = &self.reads else {
            return Ok(());
        };
        limit.limiter.check().map_err(|not_until| {
            let wait: Duration = not_until.wait_time_from(DefaultClock::default().now());
            format!(
                "client {} exceeded its rate limit of {} reads per minute; retry in {} ms",
                self.name,
                limit.per_minute,
                wait.as_millis().max(1)
            )
        })
    }
}

/// Everyone who may connect over HTTP: a tokens file's clients, an OAuth
/// issuer's, or both.
#[derive(Debug)]
pub struct Admission {
    pub tokens: Option<AccessList>,
    pub oauth: Option<ResourceServer>,
}

impl Admission {
    /// The client whose bearer `token` this is: a tokens file's first, then
    /// the issuer's.
    pub async fn admit(&self, token: &str) -> Result<Client, Refusal> {
        if let Some(client) = self.tokens.as_ref().and_then(|tokens| tokens.client(token)) {
            return Ok(client.clone());
        }
        match &self.oauth {
            Some(server) => server.authenticate(token).await,
            None => Err(Refusal::InvalidToken("the token is not valid".to_owned())),
        }
    }
}

/// Where a token comes from.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
enum TokenSource {
    FromEnv(String),
    FromFile(PathBuf),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ClientEntry {
    token: Option<TokenSource>,
    token_sha256: Option<String>,
    schemes: Vec<String>,
    reads_per_minute: Option<NonZeroU32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TokensFile {
    clients: BTreeMap<String, ClientEntry>,
}

/// The clients of a tokens file, by the SHA-256 of their token.
pub struct AccessList {
    by_token_hash: HashMap<[u8; 32], Client>,
}

impl std::fmt::Debug for AccessList {
    fn fmt(&self, out: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        out.debug_list()
            .entries(self.by_token_hash.values().map(|client| &client.name))
            .finish()
    }
}

impl AccessList {
    /// Reads a tokens file; relative secret files are taken from its folder.
    /// Tokens are hashed at once; the plain tokens are not kept.
    pub fn read(path: &Path) -> Result<Self> {
        let file: TokensFile = crate::toml_file::read(path, "tokens file")?;
        let base = path.parent().unwrap_or(Path::new("."));
        let mut by_token_hash = HashMap::new();
        for (name, entry) in file.clients {
            if name.contains(':') {
                bail!(
                    "client {name:?} of {}: a client's name has no `:`",
                    path.display()
                );
            }
            let hash = token_hash(&entry, base)
                .with_context(|| format!("client {name:?} of {}", path.display()))?;
            let scope = if entry.schemes.iter().any(|scheme| scheme == "*") {
                Scope::All
            } else {
                Scope::Schemes(Arc::new(entry.schemes.into_iter().collect::<BTreeSet<_>>()))
            };
            let reads = entry.reads_per_minute.map(|per_minute| {
                Arc::new(ReadLimit {
                    per_minute,
                    limiter: RateLimiter::direct(Quota::per_minute(per_minute)),
                })
            });
            let client = Client {
                name: name.as_str().into(),
                scope,
                reads,
            };
            if by_token_hash.insert(hash, client).is_some() {
                bail!(
                    "client {name:?} of {} shares its token with another client",
                    path.display()
                );
            }
        }
        Ok(Self { by_token_hash })
    }

    /// The client whose token `presented` is.
    pub fn client(&self, presented: &str) -> Option<&Client> {
        self.by_token_hash.get(&sha256(presented.as_bytes()))
    }
}

fn token_hash(entry: &ClientEntry, base: &Path) -> Result<[u8; 32]> {
    let token = match (&entry.token, &entry.token_sha256) {
        (Some(_), Some(_)) => bail!("give either `token` or `token_sha256`, not both"),
        (None, None) => bail!("needs `token` or `token_sha256`"),
        (None, Some(hex_hash)) => {
            let bytes = hex::decode(hex_hash.trim())
                .ok()
                .and_then(|bytes| <[u8; 32]>::try_from(bytes).ok())
                .context("`token_sha256` must be 64 hex digits")?;
            return Ok(bytes);
        }
        (Some(TokenSource::FromEnv(variable)), None) => std::env::var(variable)
            .with_context(|| format!("its token variable {variable} is not set"))?,
        (Some(TokenSource::FromFile(file)), None) => {
            let file = base.join(file);
            std::fs::read_to_string(&file)
                .with_context(|| format!("cannot read its token file {}", file.display()))?
                .trim_end_matches(['\n', '\r'])
                .to_owned()
        }
    };
    if token.len() < 16 {
        bail!("its token is shorter than 16 characters");
    }
    Ok(sha256(token.as_bytes()))
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}
