//! The operator's console: one web page, served on the operator's listener
//! (`--metrics`) and never on the MCP port, that shows each plugin's state,
//! origin, grants, limits and live figures, the namespace as any client
//! would list and read it, and the recent events. It is read-only: nothing
//! it serves changes the server.
//!
//! The page and its assets ([`assets`]) are embedded in the binary and hold
//! no data, so they are served to anyone who reaches the listener; the data
//! ([`api`]) sits behind the metrics token when the operator set one, which
//! the page sends as a bearer token. Every answer carries a strict
//! Content-Security-Policy (no inline script or style, nothing from another
//! origin), and the page writes text from plugins only as text. The data
//! answers only requests whose `Host` an attacker's name cannot carry (an
//! IP address, `localhost`, or a name the operator allowed with
//! `--allow-host`), which defeats DNS rebinding, and no request a browser
//! marks as sent from another site.

mod api;
mod assets;

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::access::Admission;
use crate::protocol::ResmuxServer;
use crate::telemetry::figures::{Figures, Sample};

/// Figures are taken over at most this long a window.
const FIGURES_WINDOW: Duration = Duration::from_secs(10);
/// Samples of the metrics are taken at most this often, however many pages
/// are open.
const SAMPLE_EVERY: Duration = Duration::from_secs(1);

/// What the console answers from.
pub struct Console {
    server: ResmuxServer,
    admission: Option<Arc<Admission>>,
    folder: PathBuf,
    transport: &'static str,
    audited: bool,
    started: SystemTime,
    /// Names the `Host` of a data request may carry besides IP addresses
    /// and `localhost`.
    allowed_hosts: Vec<String>,
    /// Recent samples of the metrics, oldest first, the newest taken no
    /// longer than [`SAMPLE_EVERY`] ago when the page last asked.
    samples: Mutex<VecDeque<Sample>>,
}

/// What the console is told of the server it shows.
pub struct Served {
    pub server: ResmuxServer,
    /// Who may connect, for viewing the namespace as one of them.
    pub admission: Option<Arc<Admission>>,
    pub folder: PathBuf,
    /// `stdio` or `http`.
    pub transport: &'static str,
    /// Whether the audit log is on.
    pub audited: bool,
    pub allowed_hosts: Vec<String>,
}

impl Console {
    pub fn new(served: Served) -> Arc<Self> {
        crate::telemetry::board().show();
        Arc::new(Self {
            server: served.server,
            admission: served.admission,
            folder: served.folder,
            transport: served.transport,
            audited: served.audited,
            started: SystemTime::now(),
            allowed_hosts: served.allowed_hosts,
            samples: Mutex::default(),
        })
    }

    /// The page and its assets: no data, open to whoever reaches the
    /// listener.
    pub fn assets() -> axum::Router {
        assets::routes().layer(axum::middleware::from_fn(secure))
    }

    /// The data the page shows, for the token layer of the listener to
    /// guard.
    pub fn api(self: &Arc<Self>) -> axum::Router {
        api::routes(self.clone())
            .layer(axum::middleware::from_fn_with_state(
                self.clone(),
                same_site_only,
            ))
            .layer(axum::middleware::from_fn(secure))
    }

    /// The figures of each plugin over the last [`FIGURES_WINDOW`], and how
    /// long that window is (zero at the first look, which has nothing to
    /// compare with).
    async fn figures(&self) -> (Figures, Duration) {
        let fresh = {
            let samples = self.lock_samples();
            samples
                .back()
                .is_some_and(|newest| newest.at.elapsed() < SAMPLE_EVERY)
        };
        if !fresh {
            // Encoding the registry takes a while on a big one: off the
            // threads that serve.
            if let Ok(sample) = tokio::task::spawn_blocking(Sample::own).await {
                let mut samples = self.lock_samples();
                samples.push_back(sample);
                while samples.len() > 2
                    && samples
                        .get(1)
                        .is_some_and(|second| second.at.elapsed() >= FIGURES_WINDOW)
                {
                    samples.pop_front();
                }
            }
        }
        let samples = self.lock_samples();
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

    fn lock_samples(&self) -> std::sync::MutexGuard<'_, VecDeque<Sample>> {
        self.samples.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether `host` (a `Host` header's value) is one no attacker's DNS
    /// name can carry: an IP address, `localhost`, or a name the operator
    /// allowed.
    fn trusts_host(&self, host: &str) -> bool {
        let name = match host.strip_prefix('[') {
            Some(bracketed) => {
                return bracketed
                    .split_once(']')
                    .is_some_and(|(address, _)| address.parse::<std::net::Ipv6Addr>().is_ok());
            }
            None => host.rsplit_once(':').map_or(host, |(name, _)| name),
        };
        name.parse::<std::net::IpAddr>().is_ok()
            || name.eq_ignore_ascii_case("localhost")
            || self
                .allowed_hosts
                .iter()
                .any(|allowed| allowed.eq_ignore_ascii_case(name))
    }
}

/// Refuses a data request whose `Host` an attacker's name could carry, or
/// that the browser says was sent from another site.
async fn same_site_only(
    State(console): State<Arc<Console>>,
    request: Request,
    next: Next,
) -> Response {
    let headers = request.headers();
    let host = text(headers, header::HOST.as_str());
    if !host.is_some_and(|host| console.trusts_host(host)) {
        return (
            StatusCode::FORBIDDEN,
            format!(
                "the console answers only an IP address, localhost or a host allowed with --allow-host, not {:?}\n",
                host.unwrap_or("")
            ),
        )
            .into_response();
    }
    if let Some(site) = text(headers, "sec-fetch-site")
        && site != "same-origin"
        && site != "none"
    {
        return (
            StatusCode::FORBIDDEN,
            format!("the console's data is not served to another site ({site})\n"),
        )
            .into_response();
    }
    next.run(request).await
}

fn text<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|value| value.to_str().ok())
}

/// Nothing runs on the page but its own script, nothing is fetched from
/// another origin, no other site may frame it, and nothing is cached.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob:; \
     connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// Adds the console's security headers to every answer.
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
