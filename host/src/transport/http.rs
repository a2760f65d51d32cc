//! Streamable HTTP at `/mcp`, both eras on one endpoint (rmcp): legacy
//! sessions with `Mcp-Session-Id`, and stateless 2026-07-28 requests. The
//! `Host` header must name an allowed host (loopback unless the operator names
//! others), and a request with an `Origin` header must come from an allowed
//! origin, or it gets 403: a web page cannot reach a local resmux through DNS
//! rebinding. With an access list, every request must carry the bearer token
//! of a listed client (or get 401 and a `WWW-Authenticate` challenge), and is
//! handed on as that client. SIGINT and SIGTERM stop it gracefully.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::serve::ListenerExt;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

use crate::access::AccessList;
use crate::protocol::ResmuxServer;

/// Where and for whom to serve HTTP.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    pub address: SocketAddr,
    /// Host names (or `host:port`) clients may use besides loopback ones.
    pub allowed_hosts: Vec<String>,
    /// Browser origins allowed besides loopback ones, e.g. `https://app.example.com:443`.
    pub allowed_origins: Vec<String>,
    /// The clients allowed in; without it, anyone who reaches the address.
    pub access: Option<Arc<AccessList>>,
}

const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "::1"];
const LOOPBACK_ORIGINS: [&str; 3] = ["http://localhost:*", "http://127.0.0.1:*", "http://[::1]:*"];

/// Serves MCP over Streamable HTTP until SIGINT or SIGTERM.
pub async fn serve_http(server: ResmuxServer, options: HttpOptions) -> Result<()> {
    if !options.address.ip().is_loopback() && options.allowed_hosts.is_empty() {
        bail!(
            "{} is not a loopback address: name the host names clients will use with --allow-host",
            options.address
        );
    }
    let shutdown = CancellationToken::new();
    let hosts = LOOPBACK_HOSTS
        .iter()
        .map(|host| host.to_string())
        .chain(options.allowed_hosts);
    let origins = LOOPBACK_ORIGINS
        .iter()
        .map(|origin| origin.to_string())
        .chain(options.allowed_origins);
    let mut config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(hosts)
        .with_allowed_origins(origins)
        .enforce_origin_validation();
    config.cancellation_token = shutdown.child_token();
    let service = StreamableHttpService::new(
        move || Ok(server.for_session()),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let mut router = axum::Router::new().nest_service("/mcp", service);
    if let Some(access) = options.access {
        router = router.layer(axum::middleware::from_fn_with_state(access, authenticate));
    }
    let listener = tokio::net::TcpListener::bind(options.address)
        .await
        .with_context(|| format!("cannot listen on {}", options.address))?;
    let stop = stop_signal()?;
    let bound = listener.local_addr()?;
    // Answers are small and go out at once: without this, Nagle's algorithm
    // meets the client's delayed acknowledgement and adds 40 ms to a reply.
    let listener = listener.tap_io(|stream| {
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!("cannot set TCP_NODELAY: {error}");
        }
    });
    tracing::info!("serving MCP over Streamable HTTP at http://{bound}/mcp");
    axum::serve(listener, router)
        .with_graceful_shutdown(async move {
            stop.await;
            tracing::info!("stopping: finishing requests in flight");
            shutdown.cancel();
        })
        .await
        .context("the HTTP server failed")
}

/// Lets a request in as the client whose bearer token it carries, or answers
/// 401 with a challenge (RFC 6750) naming what was wrong.
async fn authenticate(
    State(access): State<Arc<AccessList>>,
    mut request: Request,
    next: Next,
) -> Response {
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| {
            let (scheme, token) = value.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
        });
    let Some(token) = presented else {
        return unauthorized("Bearer realm=\"resmux\"", "a bearer token is required");
    };
    match access.client(token) {
        Some(client) => {
            request.extensions_mut().insert(client.clone());
            next.run(request).await
        }
        None => {
            tracing::warn!("refused a request with an unknown bearer token");
            unauthorized(
                "Bearer realm=\"resmux\", error=\"invalid_token\", error_description=\"the token is not valid\"",
                "the bearer token is not valid",
            )
        }
    }
}

fn unauthorized(challenge: &'static str, message: &'static str) -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, challenge)],
        message,
    )
        .into_response()
}

/// Installs the SIGINT and SIGTERM handlers now, so a signal that arrives
/// as soon as the server is ready is already a graceful stop; the returned
/// future resolves on the first of them.
fn stop_signal() -> Result<impl std::future::Future<Output = ()>> {
    let mut interrupt = signal(SignalKind::interrupt()).context("cannot watch SIGINT")?;
    let mut terminate = signal(SignalKind::terminate()).context("cannot watch SIGTERM")?;
    Ok(async move {
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
        }
    })
}
