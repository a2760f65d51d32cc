//! resmux as an OAuth 2.1 resource server (MCP authorization): a bearer JWT
//! access token is accepted when the issuer's key verifies it with an
//! algorithm the operator allows (never `none`, never a shared secret), its
//! `iss` is the issuer, its `aud` names this server's resource (RFC 8707),
//! it is within `exp`/`nbf` give or take the leeway, and it carries every
//! required scope. An opaque token (not a JWT) is checked by introspection
//! ([`introspect`]), if configured, to the same rules. The token then becomes
//! a [`Principal`] like a static token's, named after its subject. The token
//! itself goes no further.
//!
//! ```toml
//! [oauth]
//! issuer = "https://login.example.com/realms/acme"
//! resource = "https://mcp.example.com/mcp"   # the audience: this server's URI
//! scopes = ["mcp:read"]                      # every request needs all of them (one at least)
//! algorithms = ["RS256", "ES256"]            # the default: RS256, PS256, ES256, EdDSA
//! leeway_seconds = 30
//! jwks_uri = "https://…"                     # optional; discovered otherwise
//! jwks_refetch_seconds = 10                  # least time between key fetches
//! groups_claim = "groups"                    # the claim that lists the subject's groups
//!
//! [oauth.introspection]                      # optional: opaque tokens, see [`introspect`]
//! client_id = "resmux"
//! client_secret = { from_env = "RESMUX_INTROSPECTION_SECRET" }
//! ```

mod claims;
mod fetch;
mod introspect;
mod keys;

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use jsonwebtoken::{Algorithm, AlgorithmFamily, Validation};
use serde::Deserialize;
use url::Url;

use self::fetch::{Fetcher, require_secure};
use self::introspect::{Expected, Introspection, IntrospectionSection};
use self::keys::{KeyError, Keys};
use super::principal::Principal;

/// What `[oauth]` of an auth file says.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct OAuthSection {
    issuer: String,
    resource: String,
    #[serde(default)]
    scopes: Vec<String>,
    algorithms: Option<Vec<String>>,
    #[serde(default = "default_leeway")]
    leeway_seconds: u64,
    jwks_uri: Option<String>,
    #[serde(default = "default_refetch")]
    jwks_refetch_seconds: u64,
    #[serde(default = "default_groups_claim")]
    groups_claim: String,
    introspection: Option<IntrospectionSection>,
}

fn default_leeway() -> u64 {
    30
}
fn default_refetch() -> u64 {
    10
}
fn default_groups_claim() -> String {
    "groups".to_owned()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AuthFile {
    oauth: OAuthSection,
}

/// The least time between two fetches of the issuer's keys.
const MIN_REFETCH_SECONDS: u64 = 1;
/// The longest bearer token looked at.
const MAX_TOKEN_BYTES: usize = 16 * 1024;
/// The most leeway an operator may give a token's times.
const MAX_LEEWAY_SECONDS: u64 = 300;
const DEFAULT_ALGORITHMS: [Algorithm; 4] = [
    Algorithm::RS256,
    Algorithm::PS256,
    Algorithm::ES256,
    Algorithm::EdDSA,
];

/// Why a bearer token is refused.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// Not a token of this issuer for this server, or no longer valid.
    #[error("{0}")]
    InvalidToken(String),
    /// Valid, but without every scope these requests need.
    #[error("the token lacks the scopes {}", .missing.join(" "))]
    InsufficientScope { missing: Vec<String> },
    /// Not known to be valid or not: the issuer, whose keys or answer it
    /// needs, is down, slow or answers garbage. Worth a retry, not a new
    /// token.
    #[error("{reason}")]
    IssuerUnavailable {
        reason: String,
        /// When the issuer is asked again, at the soonest.
        retry_after: Duration,
    },
}

/// The resource server: its configuration and the issuer's keys.
pub struct ResourceServer {
    issuer: String,
    /// Exactly as the operator wrote it: tokens name it so in `aud`.
    resource: String,
    resource_url: Url,
    scopes: Vec<String>,
    groups_claim: String,
    leeway_seconds: u64,
    introspection: Option<Introspection>,
    /// One per algorithm the operator allows: jsonwebtoken wants every
    /// algorithm a validation accepts to fit the key.
    validations: Vec<Validation>,
    keys: Keys,
}

impl std::fmt::Debug for ResourceServer {
    fn fmt(&self, out: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        out.debug_struct("ResourceServer")
            .field("issuer", &self.issuer)
            .field("resource", &self.resource)
            .finish_non_exhaustive()
    }
}

impl ResourceServer {
    /// Reads the `[oauth]` table of an auth file.
    pub fn read(path: &Path) -> Result<Self> {
        let file: AuthFile = crate::operator_file::read_toml(path, "auth file")?;
        let base = path.parent().unwrap_or(Path::new("."));
        Self::new(file.oauth, base).with_context(|| format!("[oauth] of {}", path.display()))
    }

    fn new(section: OAuthSection, base: &Path) -> Result<Self> {
        let issuer_url = Url::parse(&section.issuer)
            .with_context(|| format!("`issuer` {:?} is not a URL", section.issuer))?;
        require_secure(&issuer_url).context("`issuer`")?;
        let resource_url = Url::parse(&section.resource)
            .with_context(|| format!("`resource` {:?} is not a URL", section.resource))?;
        require_secure(&resource_url).context("`resource`")?;
        if resource_url.fragment().is_some() || resource_url.query().is_some() {
            bail!("`resource` {resource_url} must have neither a query nor a fragment (RFC 8707)");
        }
        if resource_url.path().contains(['{', '}', ':', '*']) {
            bail!("`resource` {resource_url} has a path with `{{`, `}}`, `:` or `*`");
        }
        if section.scopes.is_empty() {
            bail!(
                "`scopes` names none: name at least one, or every token the issuer mints for \
                 this resource gets in"
            );
        }
        if section.jwks_refetch_seconds < MIN_REFETCH_SECONDS {
            bail!("`jwks_refetch_seconds` is at least {MIN_REFETCH_SECONDS}");
        }
        let jwks_uri = section
            .jwks_uri
            .as_deref()
            .map(|uri| {
                let url =
                    Url::parse(uri).with_context(|| format!("`jwks_uri` {uri:?} is not a URL"))?;
                require_secure(&url).context("`jwks_uri`")?;
                anyhow::Ok(url)
            })
            .transpose()?;
        if section.leeway_seconds > MAX_LEEWAY_SECONDS {
            bail!("`leeway_seconds` is at most {MAX_LEEWAY_SECONDS}");
        }
        if let Some(scope) = section
            .scopes
            .iter()
            .find(|scope| scope.is_empty() || !scope.chars().all(is_scope_char))
        {
            bail!("`scopes` holds {scope:?}, which is not a scope token (RFC 6749 §3.3)");
        }
        let algorithms = match &section.algorithms {
            None => DEFAULT_ALGORITHMS.to_vec(),
            Some(names) if names.is_empty() => bail!("`algorithms` names none"),
            Some(names) => names
                .iter()
                .map(|name| public_key_algorithm(name))
                .collect::<Result<_>>()?,
        };
        let validations = algorithms
            .into_iter()
            .map(|algorithm| {
                let mut validation = Validation::new(algorithm);
                validation.set_issuer(&[&section.issuer]);
                validation.set_audience(&[&section.resource]);
                validation.set_required_spec_claims(&["exp", "iss", "aud"]);
                validation.leeway = section.leeway_seconds;
                validation.validate_nbf = true;
                validation
            })
            .collect();
        let fetcher = Fetcher::new()?;
        let introspection = section
            .introspection
            .map(|introspection| Introspection::new(introspection, base, fetcher.clone()))
            .transpose()
            .context("[oauth.introspection]")?;
        let keys = Keys::new(
            section.issuer.clone(),
            jwks_uri,
            Duration::from_secs(section.jwks_refetch_seconds),
            fetcher,
        );
        Ok(Self {
            issuer: section.issuer,
            resource: section.resource,
            resource_url,
            scopes: section.scopes,
            groups_claim: section.groups_claim,
            leeway_seconds: section.leeway_seconds,
            introspection,
            validations,
            keys,
        })
    }

    /// Starts fetching the issuer's keys, in the background: a server calls it
    /// at start and listens at once. A failure is logged, not fatal: the keys
    /// are fetched again when a token needs them.
    pub fn prefetch_keys(&self) {
        self.keys.prefetch();
    }

    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// This server's resource URI, as the operator wrote it: the audience
    /// its tokens must name.
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// The same, parsed.
    pub fn resource_url(&self) -> &Url {
        &self.resource_url
    }

    /// The scopes every request needs.
    pub fn scopes(&self) -> &[String] {
        &self.scopes
    }

    /// Who a bearer `token` stands for, or why it is refused.
    pub async fn authenticate(&self, token: &str) -> Result<Principal, Refusal> {
        if token.len() > MAX_TOKEN_BYTES {
            return Err(Refusal::InvalidToken(format!(
                "the token is longer than {MAX_TOKEN_BYTES} bytes"
            )));
        }
        let principal = match &self.introspection {
            Some(introspection) if token.split('.').count() != 3 => {
                self.introspected(introspection, token).await?
            }
            _ => self.verified(token).await?,
        };
        let missing = self
            .scopes
            .iter()
            .filter(|scope| !principal.scopes.contains(*scope))
            .cloned()
            .collect::<Vec<_>>();
        if !missing.is_empty() {
            return Err(Refusal::InsufficientScope { missing });
        }
        Ok(principal)
    }

    /// Who an opaque token stands for, by the issuer's word. A token issued
    /// to a client for itself may name no `sub`: its client is its subject.
    async fn introspected(
        &self,
        introspection: &Introspection,
        token: &str,
    ) -> Result<Principal, Refusal> {
        let expected = Expected {
            issuer: &self.issuer,
            resource: &self.resource,
            leeway_seconds: self.leeway_seconds,
        };
        let answer = introspection.claims(token, &expected).await?;
        claims::principal(
            &answer,
            &self.issuer,
            &self.groups_claim,
            &["sub", "client_id"],
        )
        .map_err(Refusal::InvalidToken)
    }

    /// Who a JWT access token stands for, once its signature and claims are
    /// checked.
    async fn verified(&self, token: &str) -> Result<Principal, Refusal> {
        let header = jsonwebtoken::decode_header(token)
            .map_err(|_| Refusal::InvalidToken(claims::unreadable_header(token)))?;
        let validation = self
            .validations
            .iter()
            .find(|validation| validation.algorithms == [header.alg])
            .ok_or_else(|| {
                Refusal::InvalidToken(format!(
                    "the token is signed with {:?}, which this server does not accept",
                    header.alg
                ))
            })?;
        let key = self
            .keys
            .key(header.kid.as_deref())
            .await
            .map_err(|error| match error {
                KeyError::Unavailable | KeyError::Unanswered(_) => Refusal::IssuerUnavailable {
                    reason: error.to_string(),
                    retry_after: self.keys.refetch_after(),
                },
                KeyError::Unknown(_) | KeyError::Ambiguous => {
                    Refusal::InvalidToken(error.to_string())
                }
            })?;
        if key
            .algorithm
            .is_some_and(|algorithm| algorithm != header.alg)
        {
            return Err(Refusal::InvalidToken(format!(
                "the token's algorithm {:?} is not its key's",
                header.alg
            )));
        }
        let data = jsonwebtoken::decode::<serde_json::Map<String, serde_json::Value>>(
            token,
            &key.decoding,
            validation,
        )
        .map_err(|error| Refusal::InvalidToken(claims::describe(&error)))?;
        claims::principal(&data.claims, &self.issuer, &self.groups_claim, &["sub"])
            .map_err(Refusal::InvalidToken)
    }
}

fn public_key_algorithm(name: &str) -> Result<Algorithm> {
    let algorithm: Algorithm = name
        .parse()
        .ok()
        .with_context(|| format!("`algorithms` names {name:?}, which is no JWS algorithm"))?;
    if algorithm.family() == AlgorithmFamily::Hmac {
        bail!("`algorithms` names {name:?}: only public-key algorithms are accepted");
    }
    Ok(algorithm)
}

/// RFC 6749's `NQCHAR` without the space.
fn is_scope_char(character: char) -> bool {
    matches!(character, '\x21' | '\x23'..='\x5b' | '\x5d'..='\x7e')
}
