//! Target `http_reads`: one request, whose headers and body the input
//! writes, sent to resmux's HTTP endpoint twice, in-process: once as
//! `resmux serve --http` routes it, with the reads rmcp would accept
//! answered beside rmcp (`transport/http_reads.rs`), and once left to rmcp
//! alone. Both routes share one set of sessions, one of them open. The two
//! answers must be the same: the status, whether a session is named, and
//! the JSON-RPC message (sent as one JSON body beside rmcp, and as an event
//! stream by rmcp) or else the body itself. A difference is a rule of
//! rmcp's the fast path does not make as rmcp makes it.

use std::sync::LazyLock;

use arbitrary::Unstructured;
use axum::body::Body;
use axum::http::{Request, Response, StatusCode};
use resmux::fuzzing::{HttpEndpoints, HttpPath, http_endpoints};
use resmux::namespace::Namespace;
use resmux::protocol::{Observed, Options, ResmuxServer};
use rmcp::model::ProtocolVersion;
use serde_json::{Value, json};

use crate::provider::{self, ANSWER_WITHIN, PAGE_SIZE, Scripted};

/// The revision of the open session.
const SESSION_REVISION: &str = "2025-06-18";

/// The endpoint, and the id of the session opened on it.
struct Served {
    endpoints: HttpEndpoints,
    session: String,
}

static SERVED: LazyLock<Served> = LazyLock::new(|| provider::runtime().block_on(start()));

async fn start() -> Served {
    let scripted = Scripted {
        read: Ok(provider::text_read("r", "read")),
        ..Scripted::default()
    };
    let namespace = provider::mounted(Namespace::new(PAGE_SIZE), scripted);
    let server = Observed::new(ResmuxServer::new(namespace, Options::default()), false);
    let endpoints = http_endpoints(server);
    let initialize = json!({
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {
            "protocolVersion": SESSION_REVISION,
            "capabilities": {},
            "clientInfo": {"name": "fuzz", "version": "1"}
        }
    });
    let opened = send(&endpoints.rmcp, post(&initialize, None)).await;
    let session = opened
        .headers()
        .get("mcp-session-id")
        .and_then(|value| value.to_str().ok())
        .expect("initialize opens a session")
        .to_owned();
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let acknowledged = send(&endpoints.rmcp, post(&initialized, Some(&session))).await;
    assert_eq!(acknowledged.status(), StatusCode::ACCEPTED);
    Served { endpoints, session }
}

/// A plain POST of `message`, in the session if one is given.
fn post(message: &Value, session: Option<&str>) -> Request<Body> {
    let body = serde_json::to_vec(message).expect("a message serializes");
    let mut request = Request::post("/mcp")
        .header("host", "localhost")
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("content-length", body.len());
    if let Some(session) = session {
        request = request
            .header("mcp-session-id", session)
            .header("mcp-protocol-version", SESSION_REVISION);
    }
    request.body(Body::from(body)).expect("a request")
}

async fn send(path: &HttpPath, request: Request<Body>) -> Response<Body> {
    tokio::time::timeout(ANSWER_WITHIN, path.serve(request))
        .await
        .expect("an answer in time")
}

/// The input, read one decision a byte: a zero byte (or none left) makes
/// the usual choice, so that the empty input is a read the fast path takes.
struct Choices<'a>(Unstructured<'a>);

impl Choices<'_> {
    fn byte(&mut self) -> u8 {
        self.0.arbitrary().unwrap_or(0)
    }

    /// Whether to do what is seldom done.
    fn seldom(&mut self) -> bool {
        self.byte() != 0
    }

    /// One of `choices` (the first for a zero byte), none, or any text.
    fn one_of(&mut self, choices: &[&str]) -> Option<String> {
        let index = usize::from(self.byte()) % (choices.len() + 2);
        match choices.get(index) {
            Some(choice) => Some((*choice).to_owned()),
            None if index == choices.len() => None,
            None => Some(self.0.arbitrary::<String>().unwrap_or_default()),
        }
    }

    /// A revision, the newest first.
    fn revision(&mut self) -> Option<String> {
        let known: Vec<&str> = ProtocolVersion::KNOWN_VERSIONS
            .iter()
            .rev()
            .map(ProtocolVersion::as_str)
            .collect();
        self.one_of(&known)
    }

    /// Any bytes the input has left, up to 256.
    fn bytes(&mut self) -> Vec<u8> {
        let length = usize::from(self.byte());
        self.0
            .bytes(length.min(self.0.len()))
            .unwrap_or_default()
            .to_vec()
    }
}

/// The request the input writes, and its body: a read as a client writes
/// one, bent where the input says, or any bytes.
fn request(data: &[u8], session: &str) -> (Request<Body>, Vec<u8>) {
    let mut input = Choices(Unstructured::new(data));
    let in_session = input.seldom();
    let version = input.revision();
    let uri = input
        .one_of(&["fz://r", "fz://missing", "other://r", "fz://r?x=%20"])
        .unwrap_or_default();
    let body = if input.byte() == u8::MAX {
        input.bytes()
    } else {
        let method = input.one_of(&["resources/read", "ping", "resources/list"]);
        let mut meta = serde_json::Map::new();
        let named = match input.byte() % 3 {
            0 => version.clone(),
            1 => None,
            _ => input.revision(),
        };
        if let Some(named) = named {
            meta.insert(
                "io.modelcontextprotocol/protocolVersion".into(),
                named.into(),
            );
        }
        if !input.seldom() {
            meta.insert(
                "io.modelcontextprotocol/clientCapabilities".into(),
                json!({}),
            );
        }
        if input.seldom() {
            meta.insert(
                "io.modelcontextprotocol/clientInfo".into(),
                json!({"name": "fuzz", "version": "1"}),
            );
        }
        let mut params = json!({ "uri": uri });
        if !meta.is_empty() {
            params["_meta"] = Value::Object(meta);
        }
        let id = match input.byte() % 3 {
            0 => json!(1),
            1 => json!(input.0.arbitrary::<String>().unwrap_or_default()),
            _ => Value::Null,
        };
        let request = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let mut bytes = serde_json::to_vec(&request).expect("a request serializes");
        if input.seldom() {
            bytes.extend(input.bytes());
        }
        bytes
    };
    let mut headers: Vec<(&str, Option<String>)> = vec![
        (
            "host",
            input.one_of(&[
                "localhost",
                "127.0.0.1:8080",
                "[::1]",
                "LOCALHOST",
                "evil.example",
            ]),
        ),
        (
            "accept",
            input.one_of(&[
                "application/json, text/event-stream",
                "text/event-stream, application/json",
                "application/json",
                "application/json;q=1, text/event-stream",
                "*/*",
            ]),
        ),
        (
            "content-type",
            input.one_of(&[
                "application/json",
                "application/json; charset=utf-8",
                "text/plain",
            ]),
        ),
        ("mcp-protocol-version", version),
        ("mcp-method", input.one_of(&["resources/read", "ping"])),
        (
            "mcp-name",
            input.one_of(&[uri.as_str(), "fz://other", "=?base64?ZnonL3I=?="]),
        ),
    ];
    if input.seldom() {
        headers.push((
            "origin",
            input.one_of(&["http://localhost:3000", "https://evil.example"]),
        ));
    }
    if in_session {
        headers.push(("mcp-session-id", Some(session.to_owned())));
    }
    if input.seldom() {
        // A header given twice.
        let index = usize::from(input.byte()) % headers.len();
        let repeated = headers[index].clone();
        headers.push(repeated);
    }
    let mut request = Request::post("/mcp");
    for (name, value) in headers {
        if let Some(value) = value
            && let Ok(value) = axum::http::HeaderValue::from_str(&value)
        {
            request = request.header(name, value);
        }
    }
    if !input.seldom() {
        request = request.header("content-length", body.len());
    }
    let request = request.body(Body::from(body.clone())).expect("a request");
    (request, body)
}

/// What must be the same in the two answers.
#[derive(Debug, PartialEq)]
struct Answer {
    status: StatusCode,
    names_a_session: bool,
    /// The JSON-RPC message with an `id`, whichever way it was sent, or the
    /// body as it came.
    message: Result<Value, Vec<u8>>,
}

/// The answer of `path` to `request`, and its `Content-Type`.
async fn answer(path: &HttpPath, request: Request<Body>) -> (Answer, String) {
    let response = send(path, request).await;
    let status = response.status();
    let names_a_session = response.headers().contains_key("mcp-session-id");
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let body = tokio::time::timeout(
        ANSWER_WITHIN,
        axum::body::to_bytes(response.into_body(), 1 << 20),
    )
    .await
    .expect("the body ends in time")
    .expect("the body is read");
    let message = if content_type.starts_with("application/json") {
        serde_json::from_slice(&body).map_err(|_| body.to_vec())
    } else if content_type.starts_with("text/event-stream") {
        event_message(&body).ok_or_else(|| body.to_vec())
    } else {
        Err(body.to_vec())
    };
    let answer = Answer {
        status,
        names_a_session,
        message,
    };
    (answer, content_type)
}

/// The message with an `id` in an event stream.
fn event_message(stream: &[u8]) -> Option<Value> {
    String::from_utf8_lossy(stream)
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
        .find(|message| message.get("id").is_some())
}

pub fn run(data: &[u8]) {
    compared(data);
}

/// Sends the request `data` writes both ways and compares the answers; the
/// `Content-Type` of each.
fn compared(data: &[u8]) -> (String, String) {
    let served = &*SERVED;
    provider::runtime().block_on(async {
        let (request_beside, body) = request(data, &served.session);
        let (request_to_rmcp, _) = request(data, &served.session);
        let shown = format!(
            "{request_beside:?} with the body {:?}",
            String::from_utf8_lossy(&body)
        );
        let (beside, beside_type) = answer(&served.endpoints.beside, request_beside).await;
        let (by_rmcp, rmcp_type) = answer(&served.endpoints.rmcp, request_to_rmcp).await;
        assert_eq!(
            beside, by_rmcp,
            "the fast path and rmcp answer {shown} differently"
        );
        (beside_type, rmcp_type)
    })
}

#[cfg(test)]
mod tests {
    /// The seeds reach the fast path: a stateless read and a session's
    /// read are answered beside rmcp as one JSON body, and by rmcp as an
    /// event stream, with the same message.
    #[test]
    fn the_seeds_are_reads_the_fast_path_answers() {
        let corpus = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus/http_reads");
        for seed in ["seed-stateless-read", "seed-session-read"] {
            let data = std::fs::read(corpus.join(seed)).unwrap();
            let (beside, by_rmcp) = super::compared(&data);
            assert_eq!(
                (beside.as_str(), by_rmcp.as_str()),
                ("application/json", "text/event-stream"),
                "{seed}"
            );
        }
    }
}
