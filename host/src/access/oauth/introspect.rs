//! Opaque access tokens, checked by asking the issuer (RFC 7662): resmux
//! posts the token to the introspection endpoint as a client of the issuer,
//! and accepts it when the answer says it is active, of this issuer, for
//! this resource (`aud`, RFC 8707), an access token, and within `exp`/`nbf`.
//! An active answer is kept, by the token's SHA-256, for `cache_seconds` or
//! until the token expires, whichever comes first; a refusal for
//! [`REFUSAL_KEPT`]. So that made-up tokens cannot flood the issuer, at most
//! [`MAX_ASKING`] questions are in flight at once, and a failed discovery of
//! the endpoint is not tried again for [`DISCOVERY_RETRY`]. A question (the
//! endpoint's discovery, a turn and the answer together) ends by the
//! issuer's deadline ([`fetch::by`]): past it, the token is refused as
//! unanswered.
//!
//! ```toml
//! [oauth.introspection]
//! client_id = "resmux"
//! client_secret = { from_env = "RESMUX_INTROSPECTION_SECRET" }   # or { from_file = "…" }
//! endpoint = "https://…/introspect"   # optional: the issuer's metadata names it
//! cache_seconds = 60                  # at most 3600; 0 keeps nothing
//! ```

use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use moka::Expiry;
use moka::sync::Cache;
use serde::Deserialize;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use tokio::sync::{OnceCell, Semaphore};

use super::Refusal;
use url::Url;

use super::fetch::{self, Fetcher, Unanswered, require_secure};
use super::keys::discover;
use crate::access::TokenSource;

/// The most answers kept.
const MAX_KEPT: u64 = 10_000;
/// How long a refusal is kept.
const REFUSAL_KEPT: Duration = Duration::from_secs(10);
/// The most questions to the issuer in flight at once.
const MAX_ASKING: usize = 16;
/// How long after a failed discovery the endpoint is not looked for again.
const DISCOVERY_RETRY: Duration = Duration::from_secs(10);
/// The longest an answer may be kept.
const MAX_CACHE_SECONDS: u64 = 3600;

/// `[oauth.introspection]` of an auth file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IntrospectionSection {
    client_id: String,
    client_secret: TokenSource,
    endpoint: Option<String>,
    #[serde(default = "default_cache_seconds")]
    cache_seconds: u64,
}

fn default_cache_seconds() -> u64 {
    60
}

/// What the token must be to be accepted.
pub struct Expected<'a> {
    pub issuer: &'a str,
    pub resource: &'a str,
    pub leeway_seconds: u64,
}

/// The issuer's introspection endpoint, as one of its clients.
pub struct Introspection {
    fetcher: Fetcher,
    client_id: String,
    client_secret: String,
    configured_endpoint: Option<Url>,
    discovered_endpoint: OnceCell<Url>,
    /// When discovery last failed, and the refusal it gave.
    discovery_failed: Mutex<Option<(Instant, String)>>,
    asking: Semaphore,
    keep_for: Duration,
    kept: Cache<[u8; 32], Kept>,
}

/// An answer (an active token's claims, or why it is refused) and how long
/// it may be kept.
#[derive(Clone)]
struct Kept {
    answer: Result<Arc<Map<String, Value>>, String>,
    for_as_long_as: Duration,
}

struct KeptFor;

impl Expiry<[u8; 32], Kept> for KeptFor {
    fn expire_after_create(&self, _: &[u8; 32], kept: &Kept, _: Instant) -> Option<Duration> {
        Some(kept.for_as_long_as)
    }
}

impl Introspection {
    /// The `[oauth.introspection]` table, asking through `fetcher`; secret
    /// files are read relative to `base`.
    pub fn new(section: IntrospectionSection, base: &Path, fetcher: Fetcher) -> Result<Self> {
        let client_secret = section
            .client_secret
            .read(base)
            .context("`client_secret`")?;
        if section.client_id.is_empty() || client_secret.is_empty() {
            bail!("`client_id` and `client_secret` must not be empty");
        }
        if section.cache_seconds > MAX_CACHE_SECONDS {
            bail!("`cache_seconds` is at most {MAX_CACHE_SECONDS}");
        }
        let configured_endpoint = section
            .endpoint
            .as_deref()
            .map(|endpoint| {
                let url = Url::parse(endpoint)
                    .with_context(|| format!("`endpoint` {endpoint:?} is not a URL"))?;
                require_secure(&url).context("`endpoint`")?;
                anyhow::Ok(url)
            })
            .transpose()?;
        Ok(Self {
            fetcher,
            client_id: section.client_id,
            client_secret,
            configured_endpoint,
            discovered_endpoint: OnceCell::new(),
            discovery_failed: Mutex::new(None),
            asking: Semaphore::new(MAX_ASKING),
            keep_for: Duration::from_secs(section.cache_seconds),
            kept: Cache::builder()
                .max_capacity(MAX_KEPT)
                .expire_after(KeptFor)
                .build(),
        })
    }

    /// The claims of an active `token` that meets `expected`, or why not.
    pub async fn claims(
        &self,
        token: &str,
        expected: &Expected<'_>,
    ) -> Result<Arc<Map<String, Value>>, Refusal> {
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(kept) = self.kept.get(&key) {
            // Kept no longer than the token lives, but its `nbf` and the
            // leeway still apply.
            let claims = kept.answer.map_err(Refusal::InvalidToken)?;
            check(&claims, expected).map_err(Refusal::InvalidToken)?;
            return Ok(claims);
        }
        let unavailable = |reason| Refusal::IssuerUnavailable {
            reason,
            retry_after: Duration::ZERO,
        };
        let deadline = fetch::deadline();
        let endpoint = self
            .endpoint(expected.issuer, deadline)
            .await
            .map_err(unavailable)?;
        let asked = async {
            let _turn = self
                .asking
                .acquire()
                .await
                .expect("the semaphore is never closed");
            self.fetcher
                .post_form::<Map<String, Value>>(
                    endpoint,
                    (&self.client_id, &self.client_secret),
                    &[("token", token), ("token_type_hint", "access_token")],
                )
                .await
        };
        let answer = fetch::by(deadline, asked).await.map_err(|error| {
            tracing::warn!(%endpoint, "token introspection failed: {error:#}");
            unavailable(unasked(&error))
        })?;
        let (answer, for_as_long_as) = match check(&answer, expected) {
            Ok(lives_for) => (
                Ok(Arc::new(answer)),
                lives_for.map_or(self.keep_for, |left| left.min(self.keep_for)),
            ),
            Err(refusal) => (Err(refusal), REFUSAL_KEPT),
        };
        if !for_as_long_as.is_zero() {
            self.kept.insert(
                key,
                Kept {
                    answer: answer.clone(),
                    for_as_long_as,
                },
            );
        }
        answer.map_err(Refusal::InvalidToken)
    }

    /// The endpoint, discovered by `deadline` if the operator names none.
    async fn endpoint(&self, issuer: &str, deadline: tokio::time::Instant) -> Result<&Url, String> {
        if let Some(url) = &self.configured_endpoint {
            return Ok(url);
        }
        if let Some(url) = self.discovered_endpoint.get() {
            return Ok(url);
        }
        let recent_failure = self
            .last_discovery_failure()
            .as_ref()
            .filter(|(when, _)| when.elapsed() < DISCOVERY_RETRY)
            .map(|(_, refusal)| refusal.clone());
        if let Some(refusal) = recent_failure {
            return Err(refusal);
        }
        let discovery = self.discovered_endpoint.get_or_try_init(|| async {
            let metadata = discover(&self.fetcher, issuer).await?;
            let url = metadata
                .introspection_endpoint
                .context("the issuer's metadata names no introspection_endpoint")?;
            require_secure(&url)?;
            anyhow::Ok(url)
        });
        fetch::by(deadline, discovery).await.map_err(|error| {
            tracing::warn!(issuer, "no introspection endpoint: {error:#}");
            let refusal = unasked(&error);
            *self.last_discovery_failure() = Some((Instant::now(), refusal.clone()));
            refusal
        })
    }

    fn last_discovery_failure(&self) -> MutexGuard<'_, Option<(Instant, String)>> {
        self.discovery_failed
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }
}

/// The refusal of a token the issuer could not be asked about because of
/// `error`.
fn unasked(error: &anyhow::Error) -> String {
    if error.is::<Unanswered>() {
        error.to_string()
    } else {
        "the issuer could not be asked about the token".to_owned()
    }
}

/// Whether an introspection answer accepts the token for `expected`; if so,
/// how long the token has left, when the answer says.
fn check(answer: &Map<String, Value>, expected: &Expected<'_>) -> Result<Option<Duration>, String> {
    if answer.get("active") != Some(&Value::Bool(true)) {
        return Err("the issuer says the token is not active".to_owned());
    }
    if let Some(issuer) = answer.get("iss")
        && issuer.as_str() != Some(expected.issuer)
    {
        return Err("the token is from another issuer".to_owned());
    }
    let for_this_resource = match answer.get("aud") {
        Some(Value::String(audience)) => audience == expected.resource,
        Some(Value::Array(audiences)) => audiences
            .iter()
            .any(|audience| audience.as_str() == Some(expected.resource)),
        _ => false,
    };
    if !for_this_resource {
        return Err("the token is for another resource".to_owned());
    }
    if let Some(kind) = answer.get("token_type")
        && !kind
            .as_str()
            .is_some_and(|kind| kind.eq_ignore_ascii_case("bearer"))
    {
        return Err("the token is not a bearer access token".to_owned());
    }
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let time = |name: &str| -> Result<Option<u64>, String> {
        match answer.get(name) {
            None => Ok(None),
            Some(value) => value
                .as_u64()
                .map(Some)
                .ok_or_else(|| format!("the token's {name:?} claim is malformed")),
        }
    };
    if let Some(not_before) = time("nbf")?
        && not_before > now + expected.leeway_seconds
    {
        return Err("the token is not valid yet".to_owned());
    }
    match time("exp")? {
        Some(expires) if expires + expected.leeway_seconds <= now => {
            Err("the token has expired".to_owned())
        }
        Some(expires) => Ok(Some(Duration::from_secs(expires.saturating_sub(now)))),
        None => Ok(None),
    }
}
