//! Streamable HTTP at `/mcp`, both eras on one endpoint (rmcp): legacy
//! sessions with `Mcp-Session-Id`, and stateless 2026-07-28 requests. The
//! `Host` header must name an allowed host (loopback unless the operator names
//! others), and a request with an `Origin` header must come from an allowed
//! origin, or it gets 403: a web page cannot reach a local resmux through DNS
//! rebinding. SIGINT and SIGTERM stop it gracefully.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

use crate::protocol::ResmuxServer;

/// Where and for whom to serve HTTP.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    pub address: SocketAddr,
    /// Host names (or `host:port`) clients may use besides loopback ones.
    pub allowed_hosts: Vec<String>,
    /// Browser origins allowed besides loopback ones, e.g. `https://app.example.com:443`.
    pub allowed_origins: Vec<String>,
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
        move || Ok(server.clone()),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let router = axum::Router::new().nest_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind(options.address)
        .await
        .with_context(|| format!("cannot listen on {}", options.address))?;
    let stop = stop_signal()?;
    let bound = listener.local_addr()?;
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
