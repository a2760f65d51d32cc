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
//! ([`super::sessions`]). A client must send its request headers
//! within [`super::listener::HEADER_TIMEOUT`] and its body at a pace ([`super::pacing`]), and
//! the connections open at once are bounded in all, per source and per
//! client ([`super::connections`]): past a bound, the connection that has
//! waited longest for its request is closed to make room for a newcomer,
//! and one whose request is under way is never closed for room. A client
//! whose connections are all busy with requests is answered 429 on one
//! more. SIGINT and SIGTERM stop it gracefully. `/healthz` and `/readyz`
//! ([`super::observe`]) answer without a token, and on a connection let in
//! past the total for them alone.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::challenge;
use super::connections::{Admitted, ConnectionLimits};
use super::http_reads::{HttpReads, answer_reads};
use super::in_flight::{self, InFlight};
use super::listener::{accept, bearer};
use super::sessions::{MAX_SESSIONS_PER_CLIENT, SessionOwners};
use crate::access::{Admission, Client};
use crate::protocol::Observed;

/// How long a graceful stop waits for requests in flight.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the connections left then get to close, once their sessions
/// and streams have been ended.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(1);
const SESSION_HEADER: &str = "mcp-session-id";
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

/// What the authenticating layer needs.
struct Gate {
    access: Arc<Admission>,
    sessions: SessionOwners,
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

    /// The routes that serve `server` at `/mcp`.
    pub(crate) fn routes(&self, server: Observed, reads: ReadsBeside) -> axum::Router {
        let handler = server.clone();
        let service = Arc::new(StreamableHttpService::new(
            move || Ok(handler.for_session()),
            self.sessions.clone(),
            self.config.clone(),
        ));
        // Shared, not cloned: every layer above clones the route it wraps
        // for each request, and rmcp's service is a clone of its whole
        // configuration.
        let rmcp = axum::routing::any(move |request: Request| {
            let service = service.clone();
            async move { service.handle(request).await }
        });
        let router = axum::Router::new().nest_service("/mcp", rmcp);
        match reads {
            ReadsBeside::Answered => {
                let beside = HttpReads::new(server, self.sessions.clone(), self.hosts.clone());
                router.layer(axum::middleware::from_fn_with_state(beside, answer_reads))
            }
            ReadsBeside::LeftToRmcp => router,
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
    let sessions = endpoint.sessions.clone();
    let mut router = endpoint.routes(server, ReadsBeside::Answered);
    if let Some(access) = options.access {
        let metadata = access.oauth.as_ref().map(challenge::metadata_routes);
        let gate = Arc::new(Gate {
            access,
            sessions: SessionOwners::new(sessions),
        });
        router = router.layer(axum::middleware::from_fn_with_state(gate, authenticate));
        if let Some(metadata) = metadata {
            router = router.merge(metadata);
        }
    }
    let in_flight = Arc::new(InFlight::default());
    let router = router
        .layer(axum::middleware::from_fn_with_state(
            in_flight.clone(),
            in_flight::count,
        ))
        .merge(super::observe::probes());
    let listener = TcpListener::bind(options.address)
        .await
        .with_context(|| format!("cannot listen on {}", options.address))?;
    let stop = super::stop_signal()?;
    let bound = listener.local_addr()?;
    tracing::info!("serving MCP over Streamable HTTP at http://{bound}/mcp");
    let open = accept(listener, router, options.connections, stop).await;
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

/// Lets a request in as the client whose bearer token it carries, without
/// the token, or answers with a challenge naming what was wrong
/// ([`challenge`]). Its connection counts as that client's from now: past
/// the client's share, the client's connection that has waited longest is
/// closed to make room, and when all of them are busy with requests the
/// request is answered 429 and its connection closed. A request on a
/// session another client opened is answered 404, as for a session that
/// does not exist.
async fn authenticate(State(gate): State<Arc<Gate>>, mut request: Request, next: Next) -> Response {
    let presented = bearer(request.headers()).map(str::to_owned);
    let oauth = gate.access.oauth.as_ref();
    let Some(token) = presented else {
        return challenge::refusal(oauth, None);
    };
    let client = match gate.access.admit(&token).await {
        Ok(client) => client,
        Err(refusal) => {
            tracing::warn!("refused a request: {refusal}");
            return challenge::refusal(oauth, Some(&refusal));
        }
    };
    if let Some(admitted) = request.extensions().get::<Arc<Admitted>>()
        && let Err(share) = admitted.attribute(&client.name)
    {
        return (
            StatusCode::TOO_MANY_REQUESTS,
            [(header::CONNECTION, "close")],
            format!(
                "client {} holds {share} connections busy with requests, the most one client may hold; finish one first\n",
                client.name
            ),
        )
            .into_response();
    }
    request.headers_mut().remove(header::AUTHORIZATION);
    let session = request
        .headers()
        .get(SESSION_HEADER)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    if let Some(id) = &session
        && !gate.sessions.may_use(id, &client.name)
    {
        tracing::warn!(client = %client.name, "refused a request on a session another client opened");
        return (StatusCode::NOT_FOUND, "session not found").into_response();
    }
    let closing = request.method() == axum::http::Method::DELETE;
    request.extensions_mut().insert(client.clone());
    let response = next.run(request).await;
    match session {
        Some(id) if closing && response.status().is_success() => gate.sessions.unbind(&id),
        Some(_) => {}
        None => return bind_new_session(&gate, &client, response).await,
    }
    response
}

/// Binds the session a response opened (if it opened one) to `client`, or
/// answers 429 when the client holds its most sessions already.
async fn bind_new_session(gate: &Gate, client: &Client, response: Response) -> Response {
    let Some(id) = response
        .headers()
        .get(SESSION_HEADER)
        .and_then(|value| value.to_str().ok())
    else {
        return response;
    };
    if gate.sessions.bind(id, &client.name).await {
        return response;
    }
    tracing::warn!(client = %client.name, "refused a session: the client holds {MAX_SESSIONS_PER_CLIENT} already");
    (
        StatusCode::TOO_MANY_REQUESTS,
        format!(
            "client {} holds {MAX_SESSIONS_PER_CLIENT} sessions, the most allowed; close one first",
            client.name
        ),
    )
        .into_response()
}
