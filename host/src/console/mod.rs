//! The operator's console: one web page, served on the operator's listener
//! (`--metrics`) and never on the MCP port, that shows each plugin's state,
//! origin, grants, limits and live figures, the namespace as any client
//! would list and read it, and the recent events. It is read-only: nothing
//! it serves changes the server.
//!
//! The page and its assets ([`assets`]) are embedded in the binary and hold
//! no data, so they are served to anyone who reaches the listener. The data
//! ([`api`]) reads every resource past the access policy, so it is served
//! only behind a token of its own (the console token: never the metrics
//! token, which scrapers hold), or, without one, on a loopback listener of
//! an HTTP server whose loopback MCP port is open to anyone anyway
//! ([`Exposure`]).
//! It answers only requests whose `Host` an attacker's name cannot carry (an
//! IP address, `localhost`, or a name the operator allowed with
//! `--allow-host`), which defeats DNS rebinding, and no request a browser
//! marks as sent from another origin. Every answer of the page and its data
//! carries a strict Content-Security-Policy (no inline script or style,
//! nothing from another origin), and the page writes text from plugins only
//! as text.

mod api;
mod assets;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::access::Admission;
use crate::protocol::ResmuxServer;
use crate::telemetry::figures::{Figures, Sample};
use crate::transport::{OperatorToken, allowed_authority, request_host};

/// Figures are taken from the newest sample at least this old.
const FIGURES_WINDOW: Duration = Duration::from_secs(10);
/// Samples of the metrics are taken at most this often, however many pages
/// are open.
const SAMPLE_EVERY: Duration = Duration::from_secs(1);
/// Samples older than this (the page was away) are no base for figures.
const SAMPLES_STALE: Duration = Duration::from_secs(20);

/// What the console answers from.
pub struct Console {
    server: ResmuxServer,
    admission: Option<Arc<Admission>>,
    folder: PathBuf,
    transport: &'static str,
    audited: bool,
    started: SystemTime,
    /// Names the `Host` of a data request may carry besides IP addresses
    /// and `localhost`, in lower case.
    allowed_hosts: Vec<String>,
    exposure: Exposure,
    /// Recent samples of the metrics, oldest first; held while one is
    /// taken, so that pages asking at once share it.
    samples: tokio::sync::Mutex<VecDeque<Sample>>,
}

/// Whether the console's data may be served, and why not.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Exposure {
    /// Behind the console token.
    Token,
    /// Without a token: on a loopback listener, of an HTTP server without
    /// tokens or an issuer, whose MCP port anyone who reaches the listener
    /// can read everything through already.
    Loopback,
    /// Not at all, for this reason.
    Off(String),
}

impl Exposure {
    /// What serving the data on `listener` allows, with the console token
    /// or without it, for a server over HTTP or stdio, with or without
    /// `access_control`.
    fn of(listener: SocketAddr, token: bool, http: bool, access_control: bool) -> Self {
        if token {
            return Self::Token;
        }
        if !http {
            return Self::Off(
                "the console's data reads every resource, and over stdio only the process that started resmux may, so it needs --console-token-file"
                    .to_owned(),
            );
        }
        if !listener.ip().is_loopback() {
            return Self::Off(format!(
                "the console's data reads every resource, so on {listener}, which is not a loopback address, it needs --console-token-file"
            ));
        }
        if access_control {
            return Self::Off(
                "the console's data reads every resource past the access policy, so on a server with --tokens or --auth it needs --console-token-file"
                    .to_owned(),
            );
        }
        Self::Loopback
    }
}

/// What the console is told of the server it shows.
pub struct Served {
    pub server: ResmuxServer,
    /// Who may connect, for viewing the namespace as one of them.
    pub admission: Option<Arc<Admission>>,
    pub folder: PathBuf,
    /// Whether MCP is served over HTTP (else stdio).
    pub http: bool,
    /// The operator's listener the console is served on.
    pub listener: SocketAddr,
    /// Whether the audit log is on.
    pub audited: bool,
    pub allowed_hosts: Vec<String>,
    /// The bearer token the data must carry.
    pub token: Option<String>,
}

impl Console {
    /// The routes of the console of `served`: the page and its assets, open
    /// to whoever reaches the listener, and the data, behind the console
    /// token when there is one. The board is kept from now on, unless the
    /// console may show no data.
    pub fn routes(served: Served) -> axum::Router {
        let exposure = Exposure::of(
            served.listener,
            served.token.is_some(),
            served.http,
            served.admission.is_some(),
        );
        match &exposure {
            Exposure::Off(reason) => tracing::warn!("the console shows no data: {reason}"),
            Exposure::Token | Exposure::Loopback => crate::telemetry::board().enable(),
        }
        let token = served.token.clone();
        let console = Arc::new(Self::new(served, exposure));
        let mut data = api::routes(console.clone())
            .layer(axum::middleware::from_fn_with_state(console, exposed));
        if let Some(token) = token {
            data = crate::transport::behind_token(data, &token, OperatorToken::Console);
        }
        assets::routes()
            .merge(data)
            .layer(axum::middleware::from_fn(secure))
    }

    fn new(served: Served, exposure: Exposure) -> Self {
        Self {
            server: served.server,
            admission: served.admission,
            folder: served.folder,
            transport: if served.http { "http" } else { "stdio" },
            audited: served.audited,
            started: SystemTime::now(),
            // The console listens on a port of its own: an entry's port,
            // which is the MCP port's, does not apply.
            allowed_hosts: served
                .allowed_hosts
                .iter()
                .filter_map(|allowed| allowed_authority(allowed))
                .map(|(host, _)| host)
                .collect(),
            exposure,
            samples: tokio::sync::Mutex::default(),
        }
    }

    /// The figures of each plugin since the newest sample at least
    /// [`FIGURES_WINDOW`] old (or the oldest there is), and how long that
    /// is: zero at a first look, or the first after a long absence, which
    /// have nothing to compare with.
    async fn figures(&self) -> (Figures, Duration) {
        let mut samples = self.samples.lock().await;
        if samples
            .back()
            .is_none_or(|newest| newest.at.elapsed() >= SAMPLE_EVERY)
        {
            samples.retain(|sample| sample.at.elapsed() < SAMPLES_STALE);
            // Encoding the registry takes a while on a big one: off the
            // threads that serve.
            if let Ok(sample) = tokio::task::spawn_blocking(Sample::own).await {
                samples.push_back(sample);
            }
            while samples
                .get(1)
                .is_some_and(|second| second.at.elapsed() >= FIGURES_WINDOW)
            {
                samples.pop_front();
            }
        }
        match (samples.front(), samples.back()) {
            (Some(oldest), Some(newest)) => (
                Figures::between(oldest, newest),
                newest.at.duration_since(oldest.at),
            ),
            _ => (
                Figures {
                    rows: Default::default(),
                },
                Duration::ZERO,
            ),
        }
    }

    /// Whether `host` (a `Host` header's host, as [`request_host`] reads
    /// it) is one no attacker's DNS name can carry: an IP address,
    /// `localhost`, or a name the operator allowed.
    fn trusts_host(&self, host: &str) -> bool {
        host.parse::<std::net::IpAddr>().is_ok()
            || host == "localhost"
            || self.allowed_hosts.iter().any(|allowed| allowed == host)
    }
}

/// Serves a data request only when the data may be served at all, its
/// `Host` is one an attacker's name could not carry, and the browser does
/// not say it comes from another origin.
async fn exposed(State(console): State<Arc<Console>>, request: Request, next: Next) -> Response {
    if let Exposure::Off(reason) = &console.exposure {
        return (StatusCode::FORBIDDEN, format!("{reason}\n")).into_response();
    }
    let headers = request.headers();
    if !request_host(headers).is_some_and(|(host, _)| console.trusts_host(&host)) {
        return (
            StatusCode::FORBIDDEN,
            format!(
                "the console answers only one Host header, naming an IP address, localhost or a host allowed with --allow-host, not {:?}\n",
                header_text(headers, header::HOST.as_str()).unwrap_or("")
            ),
        )
            .into_response();
    }
    if let Some(site) = header_text(headers, "sec-fetch-site")
        && site != "same-origin"
        && site != "none"
    {
        return (
            StatusCode::FORBIDDEN,
            format!("the console's data is not served to another origin ({site})\n"),
        )
            .into_response();
    }
    next.run(request).await
}

fn header_text<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|value| value.to_str().ok())
}

/// Nothing runs on the page but its own script, nothing is fetched from
/// another origin, and no other site may frame it.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob:; \
     connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// Adds the console's security headers to every answer, and keeps it out
/// of every cache.
async fn secure(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_SECURITY_POLICY, POLICY),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::CACHE_CONTROL, "no-store"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    headers.insert(
        "cross-origin-resource-policy",
        HeaderValue::from_static("same-origin"),
    );
    response
}
