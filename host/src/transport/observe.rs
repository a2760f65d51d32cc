//! The operator's side door: `/metrics` (Prometheus text, or OpenMetrics
//! when the scraper asks for it) on a listener of its own, apart from the
//! MCP port and its tokens, and the probes `/healthz` (the process serves)
//! and `/readyz` (the plugin folder is loaded), which the MCP port answers
//! too. The probes need no token and carry no data; `/metrics` needs the
//! metrics token as a bearer token when the operator sets one. The
//! listener serves the operator's console too, whose data is guarded by a
//! token of its own ([`behind_token`]), so that a scraper's token reads no
//! resource. The listener is bounded like the MCP port (header timeout,
//! paced bodies, connections in all and per source, the one that has waited
//! longest for its request closed to make room for a newcomer), and when
//! every connection it holds is busy a few more are let in to answer the
//! probes alone ([`super::connections`]): a flood of stalled connections,
//! even from the probes' own address, leaves the probes answering.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, Result, bail};
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;

use super::connections::ConnectionLimits;
use super::listener::{accept, bearer};
use crate::telemetry::metrics;

/// Connections the metrics listener keeps open at once, from any source
/// alike (its probers, a kubelet or a scraper behind one address, share
/// one): a flood yields its longest waiters to newcomers, and
/// [`super::connections::PROBE_RESERVE`] more answer the probes alone.
const MAX_CONNECTIONS: usize = 64;
/// The shortest metrics or console token, as the shortest token of a
/// tokens file.
const MIN_TOKEN_BYTES: usize = 16;

static READY: AtomicBool = AtomicBool::new(false);

/// The plugin folder is loaded: `/readyz` answers ready from now on.
pub fn mark_ready() {
    READY.store(true, Ordering::Release);
}

/// Whether `path` is a probe's, answered on any connection.
pub(super) fn is_probe(path: &str) -> bool {
    path == "/healthz" || path == "/readyz"
}

/// The probes, for any router.
pub fn probes() -> axum::Router {
    axum::Router::new()
        .route("/healthz", get(|| async { "live\n" }))
        .route("/readyz", get(ready))
}

/// Ready once the folder is loaded, naming any plugin refused for a reason
/// that passes and tried again meanwhile (the rest serve, so the replica
/// stays in rotation).
async fn ready() -> Response {
    if READY.load(Ordering::Acquire) {
        let mut body = String::from("ready\n");
        for line in crate::telemetry::retrying::lines() {
            body.push_str(&format!("retrying {line}\n"));
        }
        body.into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "loading\n").into_response()
    }
}

/// A bearer token the operator's listener asks for.
#[derive(Debug, Clone, Copy)]
pub enum OperatorToken {
    /// For scrapes of `/metrics`.
    Metrics,
    /// For the console's data.
    Console,
}

impl OperatorToken {
    fn name(self) -> &'static str {
        match self {
            Self::Metrics => "the metrics token",
            Self::Console => "the console token",
        }
    }

    fn realm(self) -> &'static str {
        match self {
            Self::Metrics => "Bearer realm=\"resmux-metrics\"",
            Self::Console => "Bearer realm=\"resmux-console\"",
        }
    }
}

/// The token `what` that the file at `path` holds: the file's text without
/// the white space around it (as Prometheus reads its `credentials_file`).
pub fn read_token_file(path: &Path, what: OperatorToken) -> Result<String> {
    let what = what.name();
    let text = crate::operator_file::read_text(path, &format!("{what} file"))?;
    let token = text.trim();
    if token.len() < MIN_TOKEN_BYTES {
        bail!(
            "{what} in {} is shorter than {MIN_TOKEN_BYTES} characters",
            path.display()
        );
    }
    Ok(token.to_owned())
}

/// Listens on `address` for scrapes and probes and the `extra` routes, for
/// as long as the process runs; scrapes must carry `token` as their bearer
/// token when it is given. Returns once it listens.
pub async fn serve_metrics(
    address: SocketAddr,
    token: Option<&str>,
    extra: axum::Router,
) -> Result<SocketAddr> {
    let listener = TcpListener::bind(address)
        .await
        .with_context(|| format!("cannot listen for metrics on {address}"))?;
    let bound = listener.local_addr()?;
    let mut scrapes = axum::Router::new().route("/metrics", get(scrape));
    if let Some(token) = token {
        scrapes = behind_token(scrapes, token, OperatorToken::Metrics);
    }
    let router = probes().merge(scrapes).merge(extra);
    tokio::spawn(accept(
        listener,
        router,
        ConnectionLimits::new(MAX_CONNECTIONS, Some(MAX_CONNECTIONS), None),
        std::future::pending(),
    ));
    tracing::info!("serving metrics at http://{bound}/metrics, probes at /healthz and /readyz");
    Ok(bound)
}

/// `routes`, answered only for a request carrying `token`, the operator's
/// token `what`, as its bearer token.
pub fn behind_token(routes: axum::Router, token: &str, what: OperatorToken) -> axum::Router {
    let expected = Expected {
        hash: blake3::hash(token.as_bytes()),
        what,
    };
    routes.route_layer(axum::middleware::from_fn_with_state(
        expected,
        require_token,
    ))
}

/// The token a guarded route wants, as its hash, and which it is.
#[derive(Clone, Copy)]
struct Expected {
    hash: blake3::Hash,
    what: OperatorToken,
}

/// Lets a request through only with the expected token as its bearer
/// token. The presented token is hashed and compared in constant time
/// (`blake3::Hash`'s `==`): how long the check takes tells nothing of the
/// token.
async fn require_token(State(expected): State<Expected>, request: Request, next: Next) -> Response {
    let what = expected.what.name();
    let presented = bearer(request.headers()).map(|token| blake3::hash(token.as_bytes()));
    if presented == Some(expected.hash) {
        return next.run(request).await;
    }
    let reason = match presented {
        Some(_) => format!("the bearer token is not {what}"),
        None => "no bearer token".to_owned(),
    };
    let path = request.uri().path();
    // At debug: the scraper is told why, and a flood of refused scrapes
    // must not flood the log.
    tracing::debug!("refused a request for {path}: {reason}");
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, expected.what.realm())],
        format!("{path} needs {what} as a bearer token: {reason}\n"),
    )
        .into_response()
}

async fn scrape(headers: axum::http::HeaderMap) -> Response {
    let openmetrics = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .any(|accept| accept.contains("application/openmetrics-text"));
    let content_type = if openmetrics {
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    } else {
        prometheus_client::encoding::prometheus_text::CONTENT_TYPE
    };
    match tokio::task::spawn_blocking(move || metrics().encode(openmetrics)).await {
        Ok(body) => ([(header::CONTENT_TYPE, content_type)], body).into_response(),
        Err(failure) => {
            tracing::error!("cannot encode the metrics: {failure}");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "the metrics could not be encoded\n",
            )
                .into_response()
        }
    }
}
