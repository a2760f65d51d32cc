//! Reads over Streamable HTTP answered beside rmcp's HTTP service.
//!
//! rmcp spends far more on an HTTP request than resmux spends reading it:
//! a whole service per stateless request, and for a session a trip through
//! the session's worker and channels; the answer leaves as an event stream
//! (about 90 µs of server CPU per read against 11 µs over stdio, by
//! `scripts/bench`). A `resources/read` whose request rmcp would accept as it
//! stands is answered here instead: decoded in one pass (as stdio does),
//! handed to the handler through rmcp's own `Service::handle_request`, which
//! keeps every per-request rule (protocol versions, required `_meta`, result
//! shapes by era), and sent back as one JSON body, which the client accepts
//! (it must accept both JSON and event streams).
//!
//! Only a request that passes every check rmcp makes is answered here, each
//! check made the way rmcp makes it; anything else (another method, a
//! batch, an `Origin` header, a header in doubt, an unknown session) goes to
//! rmcp whole, which answers it or refuses it with its own error:
//! - the `Host` header names an allowed host (and port, where the allowed
//!   entry names one); there is no `Origin` header;
//! - `Accept` names both `application/json` and `text/event-stream`, and
//!   `Content-Type` is `application/json`; the body is at most
//!   [`MAX_BODY_BYTES`], as its `Content-Length` says;
//! - in a legacy session (`Mcp-Session-Id`): the session exists, the
//!   `MCP-Protocol-Version` header (if any) names a known revision that has
//!   `initialize`, and the request's `_meta` names no revision;
//! - stateless (2026-07-28 on): `MCP-Protocol-Version` names a known revision
//!   without `initialize`, the request's `_meta` names the same one and
//!   holds every key that revision requires, `Mcp-Method` is
//!   `resources/read` and `Mcp-Name` is the URI, plainly spelt.
//!
//! The handler sees the revision a read is in, as rmcp would show it: each
//! read's context has the peer of an idle service whose client declared
//! that revision ([`Unreached`]); in a session, the revision of its
//! `MCP-Protocol-Version` header, or 2025-03-26 without one, as rmcp takes
//! it.
//!
//! rmcp ends a session after a while without an event in its worker, and a
//! read answered here is none. So once a minute at most per session (or a
//! quarter of the time a session may go unused, if that is shorter), before
//! one of its reads is answered here, its worker is asked to open and close
//! a request's channel: that restarts its idle timer, and proves it still
//! runs (if it does not, the read goes to rmcp).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header, request::Parts};
use axum::response::{IntoResponse, Response};
use rmcp::RoleServer;
use rmcp::model::{
    ClientCapabilities, ClientRequest, GetExtensions, GetMeta, Implementation,
    InitializeRequestParams, JsonRpcRequest, ProtocolVersion, ServerJsonRpcMessage,
};
use rmcp::service::{Peer, RequestContext, RunningService, Service};
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionHandle, LocalSessionManager, SessionError,
};

use super::stdio::decode_repeated_request;
use crate::protocol::Observed;

/// The largest request body answered here; a larger one goes to rmcp.
pub const MAX_BODY_BYTES: u64 = 64 * 1024;
/// How often at most a session's worker is asked to restart its idle timer,
/// unless sessions end sooner than four times that.
const REFRESH_SESSION_AFTER: Duration = Duration::from_secs(60);
/// Sessions whose last refresh is remembered before the stale ones are
/// forgotten; past that, twice as many as were left.
const REMEMBERED_SESSIONS: usize = 1024;

// Header names as `HeaderName`s, which a lookup hashes as they are; a
// lookup by `&str` parses the name first.
pub(super) static SESSION_HEADER: HeaderName = HeaderName::from_static("mcp-session-id");
static VERSION_HEADER: HeaderName = HeaderName::from_static("mcp-protocol-version");
static METHOD_HEADER: HeaderName = HeaderName::from_static("mcp-method");
static NAME_HEADER: HeaderName = HeaderName::from_static("mcp-name");
/// How a Base64-encoded `Mcp-Name` begins; such a name goes to rmcp.
const ENCODED_NAME_PREFIX: &str = "=?";

/// The reads of one HTTP endpoint answered here.
pub struct HttpReads {
    handler: Observed,
    /// A peer for each known revision.
    peers: Vec<(ProtocolVersion, Unreached)>,
    sessions: Arc<LocalSessionManager>,
    /// The allowed hosts, each with the port it requires, if it names one.
    hosts: Vec<(String, Option<u16>)>,
    refreshed: Mutex<Refreshed>,
    /// How long after its last restart a session's idle timer is restarted.
    refresh_after: Duration,
}

/// A service of the handler that no message reaches, whose client declared
/// one revision: a read's context needs a peer, and a read never sends the
/// client anything through it. Its transport's far end is closed, so
/// anything sent through the peer would fail at once.
struct Unreached {
    peer: Peer<RoleServer>,
    _service: RunningService<RoleServer, Observed>,
}

impl Unreached {
    fn new(handler: &Observed, version: &ProtocolVersion) -> Self {
        let (transport, _) = tokio::io::duplex(64);
        let client =
            InitializeRequestParams::new(ClientCapabilities::default(), Implementation::default())
                .with_protocol_version(version.clone());
        let service = rmcp::service::serve_directly(handler.clone(), transport, Some(client));
        Self {
            peer: service.peer().clone(),
            _service: service,
        }
    }
}

/// When each session's worker was last asked to restart its idle timer.
struct Refreshed {
    when: HashMap<Arc<str>, Instant>,
    /// How many may be remembered before the stale ones are forgotten.
    most: usize,
}

impl HttpReads {
    /// Reads answered with `handler`, for the sessions of `sessions`, on an
    /// endpoint that allows `hosts` (as rmcp's `allowed_hosts`).
    pub fn new(
        handler: Observed,
        sessions: Arc<LocalSessionManager>,
        hosts: impl IntoIterator<Item = String>,
    ) -> Self {
        let peers = ProtocolVersion::KNOWN_VERSIONS
            .iter()
            .map(|version| (version.clone(), Unreached::new(&handler, version)))
            .collect();
        let refresh_after = sessions
            .session_config
            .keep_alive
            .map_or(REFRESH_SESSION_AFTER, |idle| {
                (idle / 4).min(REFRESH_SESSION_AFTER)
            });
        Self {
            handler,
            peers,
            sessions,
            refresh_after,
            hosts: hosts
                .into_iter()
                .filter_map(|host| allowed_authority(&host))
                .collect(),
            refreshed: Mutex::new(Refreshed {
                when: HashMap::new(),
                most: REMEMBERED_SESSIONS,
            }),
        }
    }

    /// Whether the request's headers let it be answered here, so far as
    /// they tell before its body is read.
    fn may_answer(&self, method: &Method, headers: &HeaderMap) -> bool {
        method == Method::POST
            && !headers.contains_key(header::ORIGIN)
            && !headers.contains_key(header::TRANSFER_ENCODING)
            && self.host_allowed(headers)
            && accepts_json_and_events(headers)
            && single(headers, &header::CONTENT_TYPE).is_some_and(is_json)
            && single(headers, &header::CONTENT_LENGTH)
                .and_then(|length| length.parse::<u64>().ok())
                .is_some_and(|length| length <= MAX_BODY_BYTES)
    }

    /// Whether the session the headers name runs, its idle timer restarted
    /// if that was not done within `refresh_after`.
    async fn session_runs(&self, headers: &HeaderMap) -> bool {
        let Some(session) = single(headers, &SESSION_HEADER).map(Arc::<str>::from) else {
            return false;
        };
        let Some(handle) = self.sessions.sessions.read().await.get(&session).cloned() else {
            return false;
        };
        if self.recently_refreshed(&session) {
            return true;
        }
        if refresh(&handle).await.is_err() {
            return false;
        }
        self.note_refreshed(session);
        true
    }

    /// Whether the `Host` header names an allowed host, as rmcp decides.
    fn host_allowed(&self, headers: &HeaderMap) -> bool {
        let Some((host, given_port)) = request_host(headers) else {
            return false;
        };
        self.hosts.iter().any(|(allowed, port)| {
            *allowed == host && port.is_none_or(|port| given_port == Some(port))
        })
    }

    fn recently_refreshed(&self, session: &str) -> bool {
        self.refreshed()
            .when
            .get(session)
            .is_some_and(|when| when.elapsed() < self.refresh_after)
    }

    fn note_refreshed(&self, session: Arc<str>) {
        let refresh_after = self.refresh_after;
        let mut refreshed = self.refreshed();
        if refreshed.when.len() >= refreshed.most {
            refreshed
                .when
                .retain(|_, when| when.elapsed() < refresh_after);
            refreshed.most = (refreshed.when.len() * 2).max(REMEMBERED_SESSIONS);
        }
        refreshed.when.insert(session, Instant::now());
    }

    fn refreshed(&self) -> MutexGuard<'_, Refreshed> {
        self.refreshed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The read in `body` and the revision it is in, if it is one rmcp would
    /// hand its handler as it stands with these `headers`: in a legacy
    /// session if they name one, stateless otherwise.
    fn read_in(
        &self,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Option<(JsonRpcRequest<ClientRequest>, &Unreached)> {
        let request = decode_repeated_request(body)?;
        let ClientRequest::ReadResourceRequest(read) = &request.request else {
            return None;
        };
        // A header that is there must be there once, as text, and name a
        // known revision; without one, a session is in 2025-03-26.
        let named = if headers.contains_key(&VERSION_HEADER) {
            single(headers, &VERSION_HEADER)?
        } else {
            ProtocolVersion::V_2025_03_26.as_str()
        };
        let (version, unreached) = self
            .peers
            .iter()
            .find(|(known, _)| known.as_str() == named)?;
        let meta = request.request.get_meta();
        let fits = if headers.contains_key(&SESSION_HEADER) {
            meta.protocol_version().is_none() && version.has_initialize()
        } else {
            headers.contains_key(&VERSION_HEADER)
                && !version.has_initialize()
                && meta.protocol_version().as_ref() == Some(version)
                && meta.missing_required_keys(version).is_empty()
                && single(headers, &METHOD_HEADER) == Some("resources/read")
                && single(headers, &NAME_HEADER).is_some_and(|name| {
                    name == read.params.uri && !name.starts_with(ENCODED_NAME_PREFIX)
                })
        };
        fits.then_some((request, unreached))
    }

    /// Answers `request`, which came with `parts`, as rmcp's handler would,
    /// in the revision of `unreached`.
    async fn answer(
        &self,
        request: JsonRpcRequest<ClientRequest>,
        unreached: &Unreached,
        parts: Parts,
    ) -> Response {
        let JsonRpcRequest {
            id, mut request, ..
        } = request;
        let mut context = RequestContext::new(id.clone(), unreached.peer.clone());
        context.meta = std::mem::take(request.get_meta_mut());
        context.extensions = std::mem::take(request.extensions_mut());
        context.extensions.insert(parts);
        // An error is 200 as well, as rmcp sends a read's error: its
        // `_meta` was checked above, and a read is never an unknown method.
        // Boxed: the handler's future (one for every request kind) would
        // otherwise be copied into every step's future above it.
        let message = match Box::pin(self.handler.handle_request(request, context)).await {
            Ok(result) => ServerJsonRpcMessage::response(result, id),
            Err(error) => ServerJsonRpcMessage::error(error, Some(id)),
        };
        match serde_json::to_vec(&message) {
            Ok(body) => (
                [(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                )],
                body,
            )
                .into_response(),
            Err(error) => {
                tracing::error!("cannot encode the answer to a read: {error}");
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "the answer could not be encoded\n",
                )
                    .into_response()
            }
        }
    }

    /// Answers a read here when it may be; hands anything else to
    /// `elsewhere` (rmcp), whole.
    pub async fn answer_or<Answer>(
        &self,
        request: Request,
        elsewhere: impl FnOnce(Request) -> Answer,
    ) -> Response
    where
        Answer: Future<Output = Response>,
    {
        let (parts, body) = request.into_parts();
        if !self.may_answer(&parts.method, &parts.headers) {
            if parts.method == Method::DELETE
                && let Some(session) = single(&parts.headers, &SESSION_HEADER)
            {
                self.refreshed().when.remove(session);
            }
            return elsewhere(Request::from_parts(parts, body)).await;
        }
        let body = match axum::body::to_bytes(body, MAX_BODY_BYTES as usize).await {
            Ok(body) => body,
            Err(error) => {
                return (
                    StatusCode::BAD_REQUEST,
                    format!("cannot read the request body: {error}\n"),
                )
                    .into_response();
            }
        };
        // A session's read waits for the session only once it is known to
        // be a read: any other request goes to rmcp, which keeps the
        // session alive.
        match self.read_in(&parts.headers, &body) {
            Some((read, unreached))
                if !parts.headers.contains_key(&SESSION_HEADER)
                    || self.session_runs(&parts.headers).await =>
            {
                self.answer(read, unreached, parts).await
            }
            _ => elsewhere(Request::from_parts(parts, Body::from(body))).await,
        }
    }
}

/// Has the session's worker open and close a request's channel: its idle
/// timer starts again, and an error says it has stopped.
async fn refresh(session: &LocalSessionHandle) -> Result<(), SessionError> {
    let channel = session.establish_request_wise_channel().await?;
    if let Some(id) = channel.http_request_id {
        session.close_request_wise_channel(id).await?;
    }
    Ok(())
}

/// The one value of header `name`, if it has exactly one and it is text.
fn single<'a>(headers: &'a HeaderMap, name: &HeaderName) -> Option<&'a str> {
    let mut values = headers.get_all(name).iter();
    let value = values.next()?;
    if values.next().is_some() {
        return None;
    }
    value.to_str().ok()
}

/// Whether the request accepts both JSON and event streams, each named
/// plainly (a media range with parameters, a weight among them, is left to
/// rmcp).
fn accepts_json_and_events(headers: &HeaderMap) -> bool {
    let (mut json, mut events) = (false, false);
    for value in headers.get_all(header::ACCEPT) {
        let Ok(value) = value.to_str() else {
            return false;
        };
        for range in value.split(',').map(str::trim) {
            if range.contains(';') || range.contains('"') {
                return false;
            }
            json |= range.eq_ignore_ascii_case("application/json");
            events |= range.eq_ignore_ascii_case("text/event-stream");
        }
    }
    json && events
}

/// Whether a `Content-Type` is JSON, as rmcp decides.
fn is_json(content_type: &str) -> bool {
    let essence = content_type
        .split_once(';')
        .map_or(content_type, |(essence, _)| essence);
    essence.trim().eq_ignore_ascii_case("application/json")
}

/// A host as rmcp compares hosts: without brackets, in lower case.
fn normal_host(host: &str) -> String {
    host.trim_matches('[')
        .trim_matches(']')
        .to_ascii_lowercase()
}

/// The host (without brackets, in lower case) and the port of a request's
/// one `Host` header, as rmcp reads it; none for a missing, repeated or
/// malformed one.
pub fn request_host(headers: &HeaderMap) -> Option<(String, Option<u16>)> {
    let authority = single(headers, &header::HOST)?
        .parse::<http::uri::Authority>()
        .ok()?;
    Some((normal_host(authority.host()), authority.port_u16()))
}

/// An allowed host entry as rmcp reads it: an authority, or else a bare
/// name; the host without brackets, in lower case.
pub fn allowed_authority(allowed: &str) -> Option<(String, Option<u16>)> {
    let allowed = allowed.trim();
    if allowed.is_empty() {
        return None;
    }
    match allowed.parse::<http::uri::Authority>() {
        Ok(authority) => Some((normal_host(authority.host()), authority.port_u16())),
        Err(_) => Some((normal_host(allowed), None)),
    }
}
