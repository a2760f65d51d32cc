//! Fetching the issuer's documents (metadata, keys, introspection answers):
//! HTTPS checked against
//! the system's trust store (with the process's TLS provider, ring, which
//! `main` installs), plain HTTP only on loopback, no redirects, a size limit,
//! and one deadline, [`ISSUER_DEADLINE`], on everything resmux asks the
//! issuer for one purpose: discovery and the key set together, or one
//! introspection (its discovery included).

use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde::de::DeserializeOwned;
use tokio::time::Instant;
use url::Url;

/// The longest resmux waits on the issuer for one purpose (its keys, or an
/// answer about a token), however many documents that takes.
const ISSUER_DEADLINE: Duration = Duration::from_secs(5);
/// The largest document read.
const MAX_DOCUMENT_BYTES: usize = 1024 * 1024;

/// An HTTP client for the issuer's documents; clones share one connection
/// pool. Its requests have no time limit of their own: each runs under
/// [`by`] and a deadline.
#[derive(Clone)]
pub struct Fetcher {
    client: reqwest::Client,
}

impl Fetcher {
    pub fn new() -> Result<Self> {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("resmux/", env!("CARGO_PKG_VERSION")))
            .build()
            .context("cannot build the HTTP client for the issuer")?;
        Ok(Self { client })
    }

    /// GETs `url` and parses its body as JSON.
    pub async fn json<T: DeserializeOwned>(&self, url: &Url) -> Result<T> {
        require_secure(url)?;
        read_json(self.client.get(url.clone()).send().await?).await
    }

    /// POSTs `form` to `url` as the client `user` with HTTP Basic (RFC 6749
    /// §2.3.1), and parses the answer as JSON.
    pub async fn post_form<T: DeserializeOwned>(
        &self,
        url: &Url,
        (user, password): (&str, &str),
        form: &[(&str, &str)],
    ) -> Result<T> {
        require_secure(url)?;
        let encode =
            |text: &str| url::form_urlencoded::byte_serialize(text.as_bytes()).collect::<String>();
        let request = self
            .client
            .post(url.clone())
            .basic_auth(encode(user), Some(encode(password)))
            .header(reqwest::header::ACCEPT, "application/json")
            .form(form);
        read_json(request.send().await?).await
    }
}

/// The issuer did not answer by the deadline.
#[derive(Debug, thiserror::Error)]
#[error("the issuer did not answer within {} s", ISSUER_DEADLINE.as_secs())]
pub struct Unanswered;

/// When resmux stops waiting on the issuer for what it asks from now on.
pub fn deadline() -> Instant {
    Instant::now() + ISSUER_DEADLINE
}

/// What `work` comes to, or [`Unanswered`] if it has not ended by `deadline`
/// (it is then dropped).
pub async fn by<T>(deadline: Instant, work: impl Future<Output = Result<T>>) -> Result<T> {
    tokio::time::timeout_at(deadline, work)
        .await
        .map_err(|_| Unanswered)?
}

/// A successful answer's body, at most [`MAX_DOCUMENT_BYTES`], as JSON.
async fn read_json<T: DeserializeOwned>(mut response: reqwest::Response) -> Result<T> {
    if !response.status().is_success() {
        bail!("answered {}", response.status());
    }
    if response
        .content_length()
        .is_some_and(|length| length > MAX_DOCUMENT_BYTES as u64)
    {
        bail!("is larger than {MAX_DOCUMENT_BYTES} bytes");
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        if body.len() + chunk.len() > MAX_DOCUMENT_BYTES {
            bail!("is larger than {MAX_DOCUMENT_BYTES} bytes");
        }
        body.extend_from_slice(&chunk);
    }
    serde_json::from_slice(&body).context("is not the JSON expected")
}

/// HTTPS, or HTTP to a loopback host.
pub fn require_secure(url: &Url) -> Result<()> {
    match url.scheme() {
        "https" => Ok(()),
        "http" if is_loopback(url) => Ok(()),
        _ => bail!("{url} must be an https: URL (http: only on loopback)"),
    }
}

fn is_loopback(url: &Url) -> bool {
    match url.host() {
        Some(url::Host::Domain(name)) => name.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(address)) => address.is_loopback(),
        Some(url::Host::Ipv6(address)) => address.is_loopback(),
        None => false,
    }
}
