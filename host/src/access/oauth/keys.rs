//! The issuer's signing keys: found through discovery (OpenID Connect, then
//! RFC 8414) unless the operator names the JWKS, and cached. A token naming a
//! key the cache does not hold starts a fetch, at most once per
//! `refetch_after`, so that rotation needs no restart and a flood of made-up
//! key ids costs the issuer one fetch per interval. A set older than
//! [`KEYS_MAX_AGE`] still answers while a fetch runs in the background; one
//! older than [`KEYS_MAX_STALE`] answers no more. Each fetch runs as a task of
//! its own that every waiting request shares: a request that goes away does
//! not cancel it, and a slow issuer holds each request up once, not once per
//! request before it. A fetch (discovery and the key set together) ends by
//! the issuer's deadline ([`fetch::by`]); when one fails, a token whose key
//! is not held is refused with the reason, until a fetch works.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{Algorithm, DecodingKey};
use serde::Deserialize;
use tokio::task::AbortHandle;
use url::Url;

use super::fetch::{self, Fetcher, Unanswered};

/// How long a fetched key set is trusted before it is fetched again.
const KEYS_MAX_AGE: Duration = Duration::from_secs(15 * 60);
/// How long a key set that cannot be fetched again is used at all.
const KEYS_MAX_STALE: Duration = Duration::from_secs(24 * 60 * 60);
/// The longest key id a refusal repeats.
const SHOWN_KID_CHARS: usize = 64;

/// One verification key and the algorithm its JWK pins, if any.
#[derive(Clone)]
pub struct Key {
    pub decoding: DecodingKey,
    pub algorithm: Option<Algorithm>,
}

/// Why no key verifies a token.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("the issuer has no key {0:?}")]
    Unknown(String),
    #[error("the token names no key and the issuer has several")]
    Ambiguous,
    #[error("the issuer's keys cannot be fetched")]
    Unavailable,
    #[error("{0}")]
    Unanswered(Unanswered),
}

/// How the last fetch failed.
#[derive(Clone, Copy)]
enum FetchFailure {
    /// The issuer did not answer by the deadline.
    Unanswered,
    /// Any other way (logged).
    Failed,
}

impl From<FetchFailure> for KeyError {
    fn from(failure: FetchFailure) -> Self {
        match failure {
            FetchFailure::Unanswered => Self::Unanswered(Unanswered),
            FetchFailure::Failed => Self::Unavailable,
        }
    }
}

#[derive(Default)]
struct KeySet {
    by_id: HashMap<String, Key>,
    without_id: Vec<Key>,
    /// When the set arrived; none before the first fetch that worked.
    fetched_at: Option<Instant>,
    /// How the fetches since the set arrived failed, if they did.
    failure: Option<FetchFailure>,
}

impl KeySet {
    fn find(&self, kid: Option<&str>) -> Result<Key, KeyError> {
        if self
            .fetched_at
            .is_none_or(|fetched| fetched.elapsed() >= KEYS_MAX_STALE)
        {
            return Err(KeyError::Unavailable);
        }
        match kid {
            Some(kid) => self
                .by_id
                .get(kid)
                .cloned()
                .ok_or_else(|| KeyError::Unknown(kid.chars().take(SHOWN_KID_CHARS).collect())),
            None => match (self.by_id.len(), &self.without_id[..]) {
                (0, [key]) => Ok(key.clone()),
                (1, []) => Ok(self.by_id.values().next().cloned().expect("one key")),
                _ => Err(KeyError::Ambiguous),
            },
        }
    }

    fn len(&self) -> usize {
        self.by_id.len() + self.without_id.len()
    }

    fn is_fresh(&self) -> bool {
        self.fetched_at
            .is_some_and(|fetched| fetched.elapsed() < KEYS_MAX_AGE)
    }
}

/// A fetch under way, which every request waiting on it shares.
type Refresh = Shared<BoxFuture<'static, ()>>;

#[derive(Default)]
struct Refreshing {
    /// The last fetch started, and its task (which ends even if nobody
    /// waits on the fetch).
    current: Option<(Refresh, AbortHandle)>,
    last_started: Option<Instant>,
}

/// The issuer's keys, as last fetched.
pub struct Keys(Arc<Inner>);

struct Inner {
    issuer: String,
    /// The operator's JWKS URI, or none to discover it.
    configured_jwks: Option<Url>,
    refetch_after: Duration,
    fetcher: Fetcher,
    set: RwLock<KeySet>,
    refreshing: Mutex<Refreshing>,
}

impl Keys {
    pub fn new(
        issuer: String,
        configured_jwks: Option<Url>,
        refetch_after: Duration,
        fetcher: Fetcher,
    ) -> Self {
        Self(Arc::new(Inner {
            issuer,
            configured_jwks,
            refetch_after,
            fetcher,
            set: RwLock::default(),
            refreshing: Mutex::default(),
        }))
    }

    /// Starts fetching the keys in the background; a server calls it once at
    /// start, and does not wait for it.
    /// The least time between two fetches.
    pub fn refetch_after(&self) -> Duration {
        self.0.refetch_after
    }

    pub fn prefetch(&self) {
        drop(self.refresh());
    }

    /// The key a token with key id `kid` is signed with.
    pub async fn key(&self, kid: Option<&str>) -> Result<Key, KeyError> {
        let (found, fresh) = {
            let set = self.current();
            (set.find(kid), set.is_fresh())
        };
        match found {
            Ok(key) => {
                if !fresh {
                    // Answer now; the newer set serves the requests after.
                    drop(self.refresh());
                }
                return Ok(key);
            }
            Err(KeyError::Ambiguous) => return Err(KeyError::Ambiguous),
            Err(_) => {}
        }
        if let Some(refresh) = self.refresh() {
            refresh.await;
        }
        let set = self.current();
        match (set.find(kid), set.failure) {
            // Whether the issuer has the key is not known: say why.
            (Err(KeyError::Unknown(_) | KeyError::Unavailable), Some(failure)) => {
                Err(failure.into())
            }
            (found, _) => found,
        }
    }

    /// The key set as last fetched.
    fn current(&self) -> RwLockReadGuard<'_, KeySet> {
        self.0
            .set
            .read()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    /// The fetch under way, or a new one if the last started at least
    /// `refetch_after` ago; none otherwise.
    fn refresh(&self) -> Option<Refresh> {
        let mut refreshing = self
            .0
            .refreshing
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        if let Some((current, task)) = &refreshing.current
            && !task.is_finished()
        {
            return Some(current.clone());
        }
        if refreshing
            .last_started
            .is_some_and(|started| started.elapsed() < self.0.refetch_after)
        {
            return None;
        }
        refreshing.last_started = Some(Instant::now());
        let inner = self.0.clone();
        let task = tokio::spawn(async move { inner.fetch_and_keep().await });
        let handle = task.abort_handle();
        let refresh = async move {
            if let Err(error) = task.await {
                tracing::error!("fetching the issuer's keys failed: {error}");
            }
        }
        .boxed()
        .shared();
        refreshing.current = Some((refresh.clone(), handle));
        Some(refresh)
    }
}

impl Inner {
    async fn fetch_and_keep(&self) {
        match fetch::by(fetch::deadline(), self.fetch()).await {
            Ok(set) => {
                tracing::info!(issuer = %self.issuer, "fetched {} keys of the issuer", set.len());
                *self.set_mut() = set;
            }
            Err(error) => {
                tracing::warn!(
                    issuer = %self.issuer,
                    "cannot fetch the issuer's keys (tried again when a token needs them): {error:#}"
                );
                self.set_mut().failure = Some(if error.is::<Unanswered>() {
                    FetchFailure::Unanswered
                } else {
                    FetchFailure::Failed
                });
            }
        }
    }

    fn set_mut(&self) -> RwLockWriteGuard<'_, KeySet> {
        self.set
            .write()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    async fn fetch(&self) -> Result<KeySet> {
        let jwks_uri = match &self.configured_jwks {
            Some(uri) => uri.clone(),
            None => discover(&self.fetcher, &self.issuer).await?.jwks_uri,
        };
        #[derive(Deserialize)]
        struct Document {
            keys: Vec<serde_json::Value>,
        }
        let document: Document = self
            .fetcher
            .json(&jwks_uri)
            .await
            .with_context(|| format!("JWKS {jwks_uri}"))?;
        let mut set = KeySet::default();
        for value in document.keys {
            let Some(jwk) = serde_json::from_value::<Jwk>(value)
                .ok()
                .filter(is_for_signing)
            else {
                continue;
            };
            let Ok(decoding) = DecodingKey::from_jwk(&jwk) else {
                continue;
            };
            // A key pinned to an algorithm that does not sign is no key here.
            let algorithm = match jwk.common.key_algorithm {
                None => None,
                Some(pinned) => match pinned.to_string().parse::<Algorithm>() {
                    Ok(algorithm) => Some(algorithm),
                    Err(_) => continue,
                },
            };
            let key = Key {
                decoding,
                algorithm,
            };
            match jwk.common.key_id {
                Some(kid) => {
                    set.by_id.insert(kid, key);
                }
                None => set.without_id.push(key),
            }
        }
        if set.by_id.is_empty() && set.without_id.is_empty() {
            bail!("JWKS {jwks_uri} holds no public signing key");
        }
        set.fetched_at = Some(Instant::now());
        Ok(set)
    }
}

/// A public key meant for signatures: not a shared secret, not an
/// encryption key.
fn is_for_signing(jwk: &Jwk) -> bool {
    use jsonwebtoken::jwk::{AlgorithmParameters, PublicKeyUse};
    let public = !matches!(jwk.algorithm, AlgorithmParameters::OctetKey(_));
    let for_signing = !matches!(
        jwk.common.public_key_use,
        Some(PublicKeyUse::Encryption | PublicKeyUse::Other(_))
    );
    public && for_signing
}

/// What the issuer's metadata says, of what resmux uses.
#[derive(Debug, Deserialize)]
pub struct IssuerMetadata {
    pub issuer: String,
    pub jwks_uri: Url,
    pub introspection_endpoint: Option<Url>,
}

/// The issuer's metadata: OpenID Connect discovery, then RFC 8414. The
/// document must name the configured issuer exactly (RFC 8414 §3.3).
pub async fn discover(fetcher: &Fetcher, issuer: &str) -> Result<IssuerMetadata> {
    let mut tried = Vec::new();
    for url in metadata_urls(issuer)? {
        match fetcher.json::<IssuerMetadata>(&url).await {
            Ok(metadata) if metadata.issuer == issuer => return Ok(metadata),
            Ok(metadata) => bail!(
                "{url} names the issuer {:?}, not {issuer:?}",
                metadata.issuer
            ),
            Err(error) => tried.push(format!("{url}: {error:#}")),
        }
    }
    bail!(
        "no metadata found for the issuer {issuer}: {}",
        tried.join("; ")
    )
}

/// OpenID Connect's location (the issuer's path, then the well-known
/// suffix), then RFC 8414's (the well-known prefix, then the issuer's path).
fn metadata_urls(issuer: &str) -> Result<[Url; 2]> {
    let base = Url::parse(issuer).with_context(|| format!("the issuer {issuer:?} is not a URL"))?;
    let path = base.path().trim_end_matches('/').to_owned();
    let mut openid = base.clone();
    openid.set_path(&format!("{path}/.well-known/openid-configuration"));
    let mut oauth = base;
    oauth.set_path(&format!("/.well-known/oauth-authorization-server{path}"));
    Ok([openid, oauth])
}

#[cfg(test)]
mod tests {
    use super::metadata_urls;

    #[test]
    fn an_issuer_with_a_path_is_looked_up_at_both_locations() {
        let [openid, oauth] = metadata_urls("https://sso.example.com/realms/acme").unwrap();
        assert_eq!(
            openid.as_str(),
            "https://sso.example.com/realms/acme/.well-known/openid-configuration"
        );
        assert_eq!(
            oauth.as_str(),
            "https://sso.example.com/.well-known/oauth-authorization-server/realms/acme"
        );
    }

    #[test]
    fn an_issuer_without_a_path_has_no_trailing_slash_in_its_locations() {
        let [openid, oauth] = metadata_urls("http://127.0.0.1:4000").unwrap();
        assert_eq!(
            openid.as_str(),
            "http://127.0.0.1:4000/.well-known/openid-configuration"
        );
        assert_eq!(
            oauth.as_str(),
            "http://127.0.0.1:4000/.well-known/oauth-authorization-server"
        );
    }
}
