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
//! rmcp ends a session after [`SESSION_KEEP_ALIVE`] without a message; it
//! never sees the reads answered here, so a session's read is handed to rmcp
//! once whenever it has seen none of that session's requests for
//! [`TOUCH_SESSION_AFTER`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header, request::Parts};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::RoleServer;
use rmcp::model::{
    ClientRequest, GetExtensions, GetMeta, JsonRpcRequest, ProtocolVersion, ServerJsonRpcMessage,
};
use rmcp::service::{Peer, RequestContext, RunningService, Service};
use rmcp::transport::streamable_http_server::SessionManager;
use rmcp::transport::streamable_http_server::session::local::{LocalSessionManager, SessionConfig};
use tokio::io::DuplexStream;

use super::stdio::decode_repeated_request;
use crate::protocol::Observed;

/// The largest request body answered here; a larger one goes to rmcp.
pub const MAX_BODY_BYTES: u64 = 64 * 1024;
/// How long rmcp keeps a session without a message.
const SESSION_KEEP_ALIVE: Duration = SessionConfig::DEFAULT_KEEP_ALIVE;
/// How long a session's requests may all be answered here before one is
/// handed to rmcp, which keeps the session alive.
const TOUCH_SESSION_AFTER: Duration = Duration::from_secs(60);
/// Sessions whose last hand-over to rmcp is remembered before those older
/// than [`SESSION_KEEP_ALIVE`] are forgotten.
const REMEMBERED_SESSIONS: usize = 1024;

const SESSION_HEADER: &str = "mcp-session-id";
const VERSION_HEADER: &str = "mcp-protocol-version";
const METHOD_HEADER: &str = "mcp-method";
const NAME_HEADER: &str = "mcp-name";
/// How a Base64-encoded `Mcp-Name` begins; such a name goes to rmcp.
const ENCODED_NAME_PREFIX: &str = "=?";

/// The reads of one HTTP endpoint answered here.
pub struct HttpReads {
    handler: Observed,
    /// A peer of a service that no message ever reaches: a read's context
    /// needs one, and a read never sends the client anything through it.
    peer: Peer<RoleServer>,
    _unreached: (RunningService<RoleServer, Observed>, DuplexStream),
    sessions: Arc<LocalSessionManager>,
    /// The allowed hosts, each with the port it requires, if it names one.
    hosts: Vec<(String, Option<u16>)>,
    /// When each session last had a request handed to rmcp.
    touched: Mutex<HashMap<Arc<str>, Instant>>,
}

/// Which era a read comes in.
enum Era {
    Session(Arc<str>),
    Stateless,
}

impl HttpReads {
    /// Reads answered with `handler`, for the sessions of `sessions`, on an
    /// endpoint that allows `hosts` (as rmcp's `allowed_hosts`).
    pub fn new(
        handler: Observed,
        sessions: Arc<LocalSessionManager>,
        hosts: impl IntoIterator<Item = String>,
    ) -> Arc<Self> {
        let (ours, theirs) = tokio::io::duplex(64);
        let unreached = rmcp::service::serve_directly(handler.clone(), ours, None);
        Arc::new(Self {
            handler,
            peer: unreached.peer().clone(),
            _unreached: (unreached, theirs),
            sessions,
            hosts: hosts
                .into_iter()
                .filter_map(|host| allowed_authority(&host))
                .collect(),
            touched: Mutex::default(),
        })
    }

    /// Whether the request's headers let it be answered here, and in which
    /// era, so far as they tell before its body is read.
    async fn may_answer(&self, method: &Method, headers: &HeaderMap) -> Option<Era> {
        if method != Method::POST
            || headers.contains_key(header::ORIGIN)
            || headers.contains_key(header::TRANSFER_ENCODING)
            || !self.host_allowed(headers)
            || !accepts_json_and_events(headers)
            || !single(headers, header::CONTENT_TYPE.as_str()).is_some_and(is_json)
            || single(headers, header::CONTENT_LENGTH.as_str())
                .and_then(|length| length.parse::<u64>().ok())
                .is_none_or(|length| length > MAX_BODY_BYTES)
        {
            return None;
        }
        if !headers.contains_key(SESSION_HEADER) {
            return Some(Era::Stateless);
        }
        let session: Arc<str> = Arc::from(single(headers, SESSION_HEADER)?);
        // Only a session rmcp knows is remembered: made-up ids fill nothing.
        if !matches!(self.sessions.has_session(&session).await, Ok(true)) {
            return None;
        }
        if !self.recently_touched(&session) {
            self.touch(&session);
            return None;
        }
        Some(Era::Session(session))
    }

    /// Whether the `Host` header names an allowed host, as rmcp decides.
    fn host_allowed(&self, headers: &HeaderMap) -> bool {
        let Some(authority) = single(headers, header::HOST.as_str())
            .and_then(|host| host.parse::<http::uri::Authority>().ok())
        else {
            return false;
        };
        let host = normal_host(authority.host());
        self.hosts.iter().any(|(allowed, port)| {
            *allowed == host && port.is_none_or(|port| authority.port_u16() == Some(port))
        })
    }

    fn recently_touched(&self, session: &str) -> bool {
        self.touched()
            .get(session)
            .is_some_and(|touched| touched.elapsed() < TOUCH_SESSION_AFTER)
    }

    /// Notes that a request of `session` goes to rmcp now.
    fn touch(&self, session: &Arc<str>) {
        let mut touched = self.touched();
        if touched.len() >= REMEMBERED_SESSIONS {
            touched.retain(|_, when| when.elapsed() < SESSION_KEEP_ALIVE);
        }
        touched.insert(session.clone(), Instant::now());
    }

    fn touched(&self) -> MutexGuard<'_, HashMap<Arc<str>, Instant>> {
        self.touched.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The read in `body`, if it is one rmcp would hand its handler as it
    /// stands in `era` with these `headers`.
    fn read_in(
        &self,
        era: &Era,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Option<JsonRpcRequest<ClientRequest>> {
        let request = decode_repeated_request(body)?;
        let ClientRequest::ReadResourceRequest(read) = &request.request else {
            return None;
        };
        let header_version = single(headers, VERSION_HEADER);
        let known = header_version.and_then(|version| {
            ProtocolVersion::KNOWN_VERSIONS
                .iter()
                .find(|known| known.as_str() == version)
        });
        let meta = request.request.get_meta();
        let meta_version = meta.protocol_version();
        let fits = match era {
            Era::Session(_) => {
                meta_version.is_none()
                    && (header_version.is_none() || known.is_some_and(|v| v.has_initialize()))
            }
            Era::Stateless => known.is_some_and(|version| {
                !version.has_initialize()
                    && meta_version.as_ref() == Some(version)
                    && meta.missing_required_keys(version).is_empty()
                    && single(headers, METHOD_HEADER) == Some("resources/read")
                    && single(headers, NAME_HEADER).is_some_and(|name| {
                        name == read.params.uri && !name.starts_with(ENCODED_NAME_PREFIX)
                    })
            }),
        };
        fits.then_some(request)
    }

    /// Answers `request`, which came with `parts`, as rmcp's handler would.
    async fn answer(&self, request: JsonRpcRequest<ClientRequest>, parts: Parts) -> Response {
        let JsonRpcRequest {
            id, mut request, ..
        } = request;
        let mut context = RequestContext::new(id.clone(), self.peer.clone());
        context.meta = std::mem::take(request.get_meta_mut());
        context.extensions = std::mem::take(request.extensions_mut());
        context.extensions.insert(parts);
        // An error is 200 as well, as rmcp sends a read's error: its
        // `_meta` was checked above, and a read is never an unknown method.
        let message = match self.handler.handle_request(request, context).await {
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
}

/// Answers a read here when it may be ([`HttpReads`]); hands anything else
/// on, whole.
pub async fn answer_reads(
    State(reads): State<Arc<HttpReads>>,
    request: Request,
    next: Next,
) -> Response {
    let (parts, body) = request.into_parts();
    let Some(era) = reads.may_answer(&parts.method, &parts.headers).await else {
        if parts.method == Method::DELETE
            && let Some(session) = single(&parts.headers, SESSION_HEADER)
        {
            reads.touched().remove(session);
        }
        return next.run(Request::from_parts(parts, body)).await;
    };
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
    match reads.read_in(&era, &parts.headers, &body) {
        Some(read) => reads.answer(read, parts).await,
        None => {
            if let Era::Session(session) = &era {
                reads.touch(session);
            }
            next.run(Request::from_parts(parts, Body::from(body))).await
        }
    }
}

/// The one value of header `name`, if it has exactly one and it is text.
fn single<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
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

/// An allowed host entry as rmcp reads it: an authority, or else a bare name.
fn allowed_authority(allowed: &str) -> Option<(String, Option<u16>)> {
    let allowed = allowed.trim();
    if allowed.is_empty() {
        return None;
    }
    match allowed.parse::<http::uri::Authority>() {
        Ok(authority) => Some((normal_host(authority.host()), authority.port_u16())),
        Err(_) => Some((normal_host(allowed), None)),
    }
}
