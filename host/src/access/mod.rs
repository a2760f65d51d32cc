//! Who is asking, and what they may do: the clients an operator names in a
//! tokens file, each with a bearer token (kept only as its SHA-256), its
//! groups, the schemes it may use and an optional rate limit on reads; the
//! clients an OAuth issuer vouches for ([`oauth`]); the one access policy
//! that decides what each of them may do ([`policy`]); and the audit log
//! ([`audit`]). The transport authenticates a request into a [`Client`] of
//! either kind; the protocol layer answers within the client's scope.
//!
//! ```toml
//! [clients.alice]
//! token = { from_env = "ALICE_TOKEN" }      # or { from_file = "..." }, or
//! # token_sha256 = "9f86d0…"                # the hex SHA-256 of the token
//! schemes = ["files", "notes"]              # or ["*"]; none: the access policy decides
//! groups = ["finance"]                      # optional, for the access policy
//! reads_per_minute = 600                    # optional
//! ```

pub mod audit;
pub mod oauth;
pub mod policy;
pub mod principal;
pub mod shared_limits;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock};

use anyhow::{Context, Result, bail};
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use serde::Deserialize;
use sha2::{Digest, Sha256};

pub use self::oauth::{Refusal, ResourceServer};
use self::policy::{AccessPolicy, SchemeGrant};
use self::principal::Principal;
use self::shared_limits::SharedLimits;
use crate::namespace::Scope;

/// What the name of an issuer's client starts with, before its subject;
/// a tokens file's client names have no `:`.
const OAUTH_PREFIX: &str = "oauth:";
/// The name of the operator looking through the console.
const CONSOLE_OPERATOR: &str = "console:operator";

/// One client, as every request it makes is answered.
#[derive(Clone)]
pub struct Client {
    /// Unique among every client: a tokens file's name, or `oauth:` and the
    /// token's subject.
    pub name: Arc<str>,
    pub principal: Arc<Principal>,
    pub scope: Scope,
    reads: Option<Arc<ReadLimit>>,
}

struct ReadLimit {
    per_minute: NonZeroU32,
    /// This replica's own count: the limit when no store is shared, or
    /// while the shared one does not answer.
    limiter: DefaultDirectRateLimiter,
    shared: Option<Arc<SharedLimits>>,
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
    /// without a tokens file or an issuer. It may do everything.
    pub fn local() -> Self {
        static LOCAL: LazyLock<Client> = LazyLock::new(|| Client::unguarded("local"));
        LOCAL.clone()
    }

    /// The operator, looking through the console: it may see everything,
    /// and is named as no client of a tokens file (whose names have no
    /// `:`) or of an issuer can be, so that the audit log tells its reads
    /// apart.
    pub fn console_operator() -> Self {
        static OPERATOR: LazyLock<Client> = LazyLock::new(|| Client::unguarded(CONSOLE_OPERATOR));
        OPERATOR.clone()
    }

    /// A client called `name` that may do everything.
    fn unguarded(name: &str) -> Self {
        Client {
            name: name.into(),
            principal: Arc::new(Principal {
                subject: name.to_owned(),
                client_id: name.to_owned(),
                issuer: name.to_owned(),
                groups: BTreeSet::new(),
                scopes: BTreeSet::new(),
            }),
            scope: Scope::All,
            reads: None,
        }
    }

    /// The client as metrics label it: a tokens file's client and `local`
    /// by name (the operator chose those names, and there are as many as
    /// the operator listed), every client of an issuer as `oauth` (its
    /// subjects are personal, and there is no bound on how many there are).
    pub fn metrics_label(&self) -> &str {
        if self.name.starts_with(OAUTH_PREFIX) {
            "oauth"
        } else {
            &self.name
        }
    }

    /// The same client, its reads not counted against its rate limit (the
    /// operator looking as it).
    pub fn without_read_limit(&self) -> Self {
        Self {
            reads: None,
            ..self.clone()
        }
    }

    /// Takes one read from the client's rate limit, shared by the replicas
    /// when they share a store, or says when to retry.
    pub async fn admit_read(&self) -> Result<(), String> {
        let Some(limit) = &self.reads else {
            return Ok(());
        };
        let shared = match &limit.shared {
            Some(store) => store.take(&self.name, limit.per_minute).await,
            None => None,
        };
        let wait = shared.unwrap_or_else(|| {
            limit
                .limiter
                .check()
                .err()
                .map(|not_until| not_until.wait_time_from(DefaultClock::default().now()))
        });
        match wait {
            None => Ok(()),
            Some(wait) => Err(format!(
                "client {} exceeded its rate limit of {} reads per minute; retry in {} ms",
                self.name,
                limit.per_minute,
                wait.as_millis().max(1)
            )),
        }
    }
}

/// Everyone who may connect over HTTP: a tokens file's clients, an OAuth
/// issuer's, or both; and the access policy that guards each of them.
pub struct Admission {
    /// The tokens file's clients, by the SHA-256 of their token.
    tokens: HashMap<[u8; 32], Client>,
    pub oauth: Option<ResourceServer>,
    policy: Arc<AccessPolicy>,
}

impl std::fmt::Debug for Admission {
    fn fmt(&self, out: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        out.debug_struct("Admission")
            .field("tokens", &self.tokens.values().collect::<Vec<_>>())
            .field("oauth", &self.oauth)
            .field("policy", &self.policy)
            .finish()
    }
}

impl Admission {
    /// Admits the clients of `tokens` and of the issuer of `oauth`, guarded
    /// by the access policy made of `policy_file` (if any) and the tokens
    /// file's schemes.
    pub fn new(
        tokens: Option<AccessList>,
        oauth: Option<ResourceServer>,
        policy_file: Option<&Path>,
    ) -> Result<Self> {
        let listed = tokens.map_or_else(Vec::new, |list| list.clients);
        let grants: Vec<SchemeGrant<'_>> = listed
            .iter()
            .map(|client| SchemeGrant {
                client: &client.name,
                schemes: &client.schemes,
            })
            .collect();
        let default_issuer = oauth.as_ref().map(ResourceServer::issuer);
        let policy = Arc::new(AccessPolicy::build(policy_file, &grants, default_issuer)?);
        let tokens = listed
            .into_iter()
            .map(|listed| {
                let principal = Principal::of_tokens_file(&listed.name, listed.groups);
                let guard = policy.guard(&listed.name, &principal);
                let client = Client {
                    name: listed.name.into(),
                    principal: Arc::new(principal),
                    scope: Scope::Guarded(guard),
                    reads: listed.reads,
                };
                (listed.token_hash, client)
            })
            .collect();
        Ok(Self {
            tokens,
            oauth,
            policy,
        })
    }

    /// The client called `name`, for explaining a decision offline: a
    /// tokens file's client (whose groups are the file's), or `oauth:SUBJECT`
    /// with the groups, scopes and client id a token of the issuer would
    /// carry.
    pub fn client_named(
        &self,
        name: &str,
        groups: BTreeSet<String>,
        scopes: BTreeSet<String>,
        client_id: Option<String>,
    ) -> Result<Client> {
        if let Some(subject) = name.strip_prefix(OAUTH_PREFIX) {
            let server = self
                .oauth
                .as_ref()
                .context("an `oauth:` principal needs the auth file (--auth)")?;
            return Ok(self.oauth_client(Principal {
                subject: subject.to_owned(),
                client_id: client_id.unwrap_or_default(),
                issuer: server.issuer().to_owned(),
                groups,
                scopes,
            }));
        }
        if !groups.is_empty() || !scopes.is_empty() || client_id.is_some() {
            bail!(
                "a tokens-file client's groups come from the tokens file; give no --group, --scope or --client-id"
            );
        }
        self.tokens
            .values()
            .find(|client| &*client.name == name)
            .cloned()
            .with_context(|| {
                format!(
                    "no client {name:?} in the tokens file (an issuer's client is `oauth:SUBJECT`)"
                )
            })
    }

    /// The names of the tokens file's clients, in order.
    pub fn client_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .tokens
            .values()
            .map(|client| client.name.to_string())
            .collect();
        names.sort_unstable();
        names
    }

    /// The access policy every client is guarded by.
    pub fn policy(&self) -> &AccessPolicy {
        &self.policy
    }

    /// The client whose bearer `token` this is: a tokens file's first, then
    /// the issuer's.
    pub async fn admit(&self, token: &str) -> Result<Client, Refusal> {
        if let Some(client) = self.tokens.get(&sha256(token.as_bytes())) {
            return Ok(client.clone());
        }
        let Some(server) = &self.oauth else {
            return Err(Refusal::InvalidToken("the token is not valid".to_owned()));
        };
        Ok(self.oauth_client(server.authenticate(token).await?))
    }

    /// The client an issuer's token for `principal` stands for: `oauth:` and
    /// its subject, guarded by the access policy.
    fn oauth_client(&self, principal: Principal) -> Client {
        let name = format!("{OAUTH_PREFIX}{}", principal.subject);
        let guard = self.policy.guard(&name, &principal);
        Client {
            name: name.into(),
            principal: Arc::new(principal),
            scope: Scope::Guarded(guard),
            reads: None,
        }
    }
}

/// Where a secret (a client's token, the introspection secret) comes from.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum TokenSource {
    FromEnv(String),
    FromFile(PathBuf),
}

impl TokenSource {
    /// The secret: the variable's value, or the file's text (relative to
    /// `base`) without its line ending.
    pub(crate) fn read(&self, base: &Path) -> Result<String> {
        match self {
            Self::FromEnv(variable) => std::env::var(variable)
                .with_context(|| format!("the variable {variable} is not set")),
            Self::FromFile(file) => {
                let file = base.join(file);
                Ok(crate::operator_file::read_text(&file, "secret file")?
                    .trim_end_matches(['\n', '\r'])
                    .to_owned())
            }
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ClientEntry {
    token: Option<TokenSource>,
    token_sha256: Option<String>,
    #[serde(default)]
    schemes: Vec<String>,
    #[serde(default)]
    groups: BTreeSet<String>,
    reads_per_minute: Option<NonZeroU32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TokensFile {
    clients: BTreeMap<String, ClientEntry>,
}

/// The clients of a tokens file.
pub struct AccessList {
    clients: Vec<ListedClient>,
}

/// One client of a tokens file.
struct ListedClient {
    name: String,
    token_hash: [u8; 32],
    schemes: Vec<String>,
    groups: BTreeSet<String>,
    reads: Option<Arc<ReadLimit>>,
}

impl AccessList {
    /// Reads a tokens file; relative secret files are taken from its folder.
    /// Tokens are hashed at once; the plain tokens are not kept. Rate limits
    /// are taken from `shared`, when replicas share one.
    pub fn read(path: &Path, shared: Option<&Arc<SharedLimits>>) -> Result<Self> {
        let file: TokensFile = crate::operator_file::read_toml(path, "tokens file")?;
        let base = path.parent().unwrap_or(Path::new("."));
        let mut clients: Vec<ListedClient> = Vec::new();
        for (name, entry) in file.clients {
            if name.contains(':') {
                bail!(
                    "client {name:?} of {}: a client's name has no `:`",
                    path.display()
                );
            }
            let token_hash = token_hash(&entry, base)
                .with_context(|| format!("client {name:?} of {}", path.display()))?;
            if clients.iter().any(|client| client.token_hash == token_hash) {
                bail!(
                    "client {name:?} of {} shares its token with another client",
                    path.display()
                );
            }
            let reads = entry.reads_per_minute.map(|per_minute| {
                Arc::new(ReadLimit {
                    per_minute,
                    limiter: RateLimiter::direct(Quota::per_minute(per_minute)),
                    shared: shared.cloned(),
                })
            });
            clients.push(ListedClient {
                name,
                token_hash,
                schemes: entry.schemes,
                groups: entry.groups,
                reads,
            });
        }
        Ok(Self { clients })
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
        (Some(source), None) => source.read(base).context("its token")?,
    };
    if token.len() < 16 {
        bail!("its token is shorter than 16 characters");
    }
    Ok(sha256(token.as_bytes()))
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}
