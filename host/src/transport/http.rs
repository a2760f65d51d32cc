//! Streamable HTTP at `/mcp`, both eras on one endpoint (rmcp): legacy
//! sessions with `Mcp-Session-Id`, and stateless 2026-07-28 requests; a
//! read rmcp would accept as it stands is answered beside it
//! ([`super::http_reads`]). The
//! `Host` header must name an allowed host (loopback unless the operator names
//! others), and a request with an `Origin` header must come from an allowed
//! origin, or it gets 403: a web page cannot reach a local resmux through DNS
//! rebinding. With an access list or an OAuth issuer, every request must
//! carry the bearer token of a listed client or a valid access token (or get
//! a `WWW-Authenticate` challenge, [`super::challenge`]), and is handed on as
//! that client; a legacy session belongs to the client that opened it
//! ([`super::gate`], [`super::sessions`]). A client must send its request headers
//! within [`super::listener::HEADER_TIMEOUT`] and its body at a pace ([`super::pacing`]), and
//! the connections open at once are bounded in all, per source and per
//! client ([`super::connections`]): past a bound, the connection that has
//! waited longest for its request is closed to make room for a newcomer,
//! and one whose request is under way is never closed for room. A client
//! whose connections are all busy with requests is answered 429 on one
//! more. SIGINT and SIGTERM stop it gracefully. `/healthz` and `/readyz`
//! ([`super::observe`]) answer without a token, and on a connection let in
//! past the total for them alone. A request to `/mcp` runs through its
//! steps as plain calls in one future ([`McpPath`]), anything else through
//! a router.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::challenge;
use super::connections::ConnectionLimits;
use super::gate::{self, Gate};
use super::http_reads::HttpReads;
use super::in_flight::{self, InFlight};
use super::listener::{Serve, accept};
use super::sessions::SessionOwners;
use crate::access::Admission;
use crate::protocol::Observed;

/// How long a graceful stop waits for requests in flight.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the connections left then get to close, once their sessions
/// and streams have been ended.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(1);
/// Where the MCP endpoint is served.
const MCP_PATH: &str = "/mcp";
/// How long a session may go unused unless the operator says.
pub const DEFAULT_SESSION_IDLE: Duration = Duration::from_secs(300);

/// Where and for whom to serve HTTP.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    pub address: SocketAddr,
    /// Host names (or `host:port`) clients may use besides loopback ones.
    pub allowed_hosts: Vec<String>,
    /// Browser origins allowed besides loopback ones, e.g. `https://app.example.com:443`.
    pub allowed_origins: Vec<String>,
    /// The clients allowed in; without it, anyone who reaches the address.
    pub access: Option<Arc<Admission>>,
    /// Connections open at once, in all, per source and per client; past a
    /// bound, the one that has waited longest for its request is closed to
    /// make room.
    pub connections: ConnectionLimits,
    /// How long a session may go unused before it ends.
    pub session_idle: Duration,
}

const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "::1"];
const LOOPBACK_ORIGINS: [&str; 3] = ["http://localhost:*", "http://127.0.0.1:*", "http://[::1]:*"];

/// The MCP endpoint: rmcp's Streamable HTTP service at `/mcp`, with its
/// hosts, origins and sessions.
pub(crate) struct Endpoint {
    config: StreamableHttpServerConfig,
    /// Every allowed host: loopback ones, and the operator's.
    hosts: Vec<String>,
    pub sessions: Arc<LocalSessionManager>,
}

/// Whether the reads rmcp would accept as they stand are answered beside
/// it ([`super::http_reads`]), or left to rmcp (to compare the two).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReadsBeside {
    Answered,
    LeftToRmcp,
}

impl Endpoint {
    /// An endpoint that allows loopback hosts and origins and `allowed_hosts`
    /// and `allowed_origins` besides, whose sessions end after
    /// `session_idle` unused or when `shutdown` is cancelled.
    pub(crate) fn new(
        allowed_hosts: Vec<String>,
        allowed_origins: Vec<String>,
        session_idle: Duration,
        shutdown: &CancellationToken,
    ) -> Self {
        let hosts: Vec<String> = LOOPBACK_HOSTS
            .iter()
            .map(|host| host.to_string())
            .chain(allowed_hosts)
            .collect();
        let origins = LOOPBACK_ORIGINS
            .iter()
            .map(|origin| origin.to_string())
            .chain(allowed_origins);
        let mut config = StreamableHttpServerConfig::default()
            .with_allowed_hosts(hosts.clone())
            .with_allowed_origins(origins)
            .enforce_origin_validation();
        config.cancellation_token = shutdown.child_token();
        let mut sessions = LocalSessionManager::default();
        sessions.session_config.keep_alive = Some(session_idle);
        Self {
            config,
            hosts,
            sessions: Arc::new(sessions),
        }
    }

    /// What serves `server` at `/mcp`, with the clients of `gate` (anyone
    /// without one), counting its requests in `in_flight`.
    pub(crate) fn path(
        &self,
        server: Observed,
        reads: ReadsBeside,
        gate: Option<Gate>,
        in_flight: Arc<InFlight>,
    ) -> McpPath {
        let handler = server.clone();
        let rmcp = StreamableHttpService::new(
            move || Ok(handler.for_session()),
            self.sessions.clone(),
            self.config.clone(),
        );
        let reads = (reads == ReadsBeside::Answered)
            .then(|| HttpReads::new(server, self.sessions.clone(), self.hosts.clone()));
        McpPath {
            rmcp,
            reads,
            gate,
            in_flight,
        }
    }
}

/// The MCP endpoint's steps, each a plain call, so that a request runs
/// through them all in one future, with no router between them and no
/// service cloned for it: counted in flight, let in as its client, and a
/// read answered beside rmcp, any other request by rmcp.
pub(crate) struct McpPath {
    rmcp: StreamableHttpService<Observed, LocalSessionManager>,
    reads: Option<HttpReads>,
    gate: Option<Gate>,
    in_flight: Arc<InFlight>,
}

impl McpPath {
    /// The answer to `request`, whose body is paced by the caller.
    pub(crate) async fn serve(&self, request: Request) -> Response {
        in_flight::counted(&self.in_flight, request, |request| self.let_in(request)).await
    }

    async fn let_in(&self, request: Request) -> Response {
        match &self.gate {
            Some(gate) => gate::authenticate(gate, request, |request| self.answer(request)).await,
            None => self.answer(request).await,
        }
    }

    async fn answer(&self, request: Request) -> Response {
        match &self.reads {
            Some(reads) => {
                reads
                    .answer_or(request, |request| self.answer_by_rmcp(request))
                    .await
            }
            None => self.answer_by_rmcp(request).await,
        }
    }

    async fn answer_by_rmcp(&self, request: Request) -> Response {
        // Boxed: rmcp's future would otherwise weigh on every read's.
        Box::pin(self.rmcp.handle(request)).await.map(Body::new)
    }
}

/// The MCP port: `/mcp` (and any path below it, as rmcp serves one
/// endpoint) on its own steps, anything else (the probes, OAuth metadata,
/// 404) by a router.
struct Front {
    mcp: McpPath,
    rest: axum::Router,
}

impl Serve for Front {
    async fn serve(&self, request: Request) -> Response {
        let path = request.uri().path();
        if path == MCP_PATH
            || path
                .strip_prefix(MCP_PATH)
                .is_some_and(|below| below.starts_with('/'))
        {
            self.mcp.serve(request).await
        } else {
            self.rest.serve(request).await
        }
    }
}

/// Serves MCP over Streamable HTTP until SIGINT or SIGTERM.
pub async fn serve_http(server: Observed, options: HttpOptions) -> Result<()> {
    if !options.address.ip().is_loopback() && options.allowed_hosts.is_empty() {
        bail!(
            "{} is not a loopback address: name the host names clients will use with --allow-host",
            options.address
        );
    }
    let shutdown = CancellationToken::new();
    let endpoint = Endpoint::new(
        options.allowed_hosts,
        options.allowed_origins,
        options.session_idle,
        &shutdown,
    );
    let mut rest = super::observe::probes();
    let gate = options.access.map(|access| {
        if let Some(oauth) = &access.oauth {
            rest = std::mem::take(&mut rest).merge(challenge::metadata_routes(oauth));
        }
        Gate::new(access, SessionOwners::new(endpoint.sessions.clone()))
    });
    let in_flight = Arc::new(InFlight::default());
    let mcp = endpoint.path(server, ReadsBeside::Answered, gate, in_flight.clone());
    let front = Front { mcp, rest };
    let listener = TcpListener::bind(options.address)
        .await
        .with_context(|| format!("cannot listen on {}", options.address))?;
    let stop = super::stop_signal()?;
    let bound = listener.local_addr()?;
    tracing::info!("serving MCP over Streamable HTTP at http://{bound}/mcp");
    let open = accept(listener, front, options.connections, stop).await;
    // Requests in flight are answered whole before their sessions and the
    // streams still open are ended, all within the one deadline.
    tracing::info!("stopping: finishing requests in flight");
    let deadline = tokio::time::Instant::now() + DRAIN_TIMEOUT;
    let answered = tokio::time::timeout_at(deadline, in_flight.until_none()).await;
    shutdown.cancel();
    let closed = tokio::time::timeout_at(
        deadline.max(tokio::time::Instant::now() + CLOSE_TIMEOUT),
        open.shutdown(),
    )
    .await;
    if answered.is_err() || closed.is_err() {
        tracing::warn!(
            "stopped with requests still in flight after {} s",
            DRAIN_TIMEOUT.as_secs()
        );
    }
    Ok(())
}
