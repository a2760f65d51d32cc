//! Target `headers`: HTTP requests to a real resmux Streamable HTTP server
//! with a tokens file and an OAuth issuer (one that cannot be reached, so
//! that a JWT is decoded and checked as far as its keys), whose headers the
//! input writes: `Host`, `Origin`, `Authorization` (a token, a JWT the
//! input makes, or anything), `Mcp-Session-Id` (a live session's or any),
//! `Last-Event-ID`, `traceparent`, `Mcp-Name` and `MCP-Protocol-Version`,
//! each either a valid value or any bytes but line breaks, raw on the wire.
//! Every request gets a whole status line within 5 s, never a server error
//! but the 503 that asks to retry while the issuer is unreachable, and
//! nothing in the server panics.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use arbitrary::Unstructured;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use resmux::access::{AccessList, Admission, ResourceServer};
use resmux::contract::{Page, ResourceEntry};
use resmux::namespace::Namespace;
use resmux::protocol::{Observed, Options, ResmuxServer};
use resmux::transport::{ConnectionLimits, DEFAULT_SESSION_IDLE, HttpOptions, serve_http};

use crate::provider::{self, PAGE_SIZE, Scripted};

/// How long a request may wait for its status line.
const ANSWER_WITHIN: Duration = Duration::from_secs(5);

/// The token of the tokens file's one client, and its SHA-256.
const TOKEN: &str = "fuzz-token-with-thirty-two-bytes-at-least";
const TOKEN_SHA256: &str = "a477eee074abf924eff819b9a0214e5d77830b4e27bbfad39d0ac0d0407b46ea";

/// An issuer on a loopback port nothing listens on.
const UNREACHABLE_ISSUER: &str = "http://127.0.0.1:9";

/// Panics anywhere in the process since it started.
static PANICS: AtomicUsize = AtomicUsize::new(0);

/// The server, started once: its address and a session it opened.
struct Server {
    address: SocketAddr,
    session: String,
    _folder: tempfile::TempDir,
}

static SERVER: LazyLock<Server> = LazyLock::new(start);

fn start() -> Server {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        PANICS.fetch_add(1, Ordering::SeqCst);
        previous(info);
    }));
    let folder = tempfile::tempdir().expect("a temporary folder");
    let tokens = folder.path().join("tokens.toml");
    std::fs::write(
        &tokens,
        format!("[clients.fuzz]\ntoken_sha256 = \"{TOKEN_SHA256}\"\nschemes = [\"*\"]\n"),
    )
    .expect("the tokens file is written");
    let access = AccessList::read(&tokens, None).expect("the tokens file loads");
    let address = TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port");
    let auth = folder.path().join("auth.toml");
    std::fs::write(
        &auth,
        format!(
            "[oauth]\nissuer = \"{UNREACHABLE_ISSUER}\"\nresource = \"http://{address}/mcp\"\n\
             scopes = [\"mcp:read\"]\njwks_refetch_seconds = 1\n"
        ),
    )
    .expect("the auth file is written");
    let _already_installed = rustls::crypto::ring::default_provider().install_default();
    let oauth = ResourceServer::read(&auth).expect("the auth file loads");
    let admission = Admission::new(Some(access), Some(oauth), None).expect("the admission builds");
    let options = HttpOptions {
        address,
        allowed_hosts: vec!["mcp.example.com".into()],
        allowed_origins: vec!["https://app.example.com".into()],
        access: Some(Arc::new(admission)),
        connections: ConnectionLimits::new(256, Some(256), Some(256)),
        session_idle: DEFAULT_SESSION_IDLE,
    };
    let scripted = Scripted {
        list: Ok(Page {
            items: vec![ResourceEntry {
                path: "r".into(),
                size: None,
                metadata: resmux::contract::Metadata {
                    name: "r".into(),
                    ..Default::default()
                },
            }],
            next_cursor: None,
            cache: None,
        }),
        read: Ok(provider::text_read("r", "read")),
        ..Scripted::default()
    };
    let namespace = provider::mounted(Namespace::new(PAGE_SIZE), scripted);
    let server = Observed::new(ResmuxServer::new(namespace, Options::default()), false);
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime");
        runtime
            .block_on(serve_http(server, options))
            .expect("the server serves");
    });
    let begun = Instant::now();
    while TcpStream::connect(address).is_err() {
        assert!(begun.elapsed() < ANSWER_WITHIN, "the server did not start");
        std::thread::sleep(Duration::from_millis(5));
    }
    let initialize = br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"fuzz","version":"1"}}}"#;
    let head = exchange(
        address,
        &request(
            "POST",
            &[
                ("Host", "127.0.0.1"),
                ("Authorization", &format!("Bearer {TOKEN}")),
            ],
            initialize,
        ),
    );
    let session = head
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("mcp-session-id")
                .then(|| value.trim().to_owned())
        })
        .unwrap_or_else(|| panic!("initialize opened no session: {head}"));
    Server {
        address,
        session,
        _folder: folder,
    }
}

/// A request with `headers` and `body`, the connection closed after it.
fn request(method: &str, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut bytes = format!("{method} /mcp HTTP/1.1\r\n").into_bytes();
    for (name, value) in headers {
        bytes.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
    }
    bytes.extend_from_slice(
        format!(
            "Accept: application/json, text/event-stream\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    );
    bytes.extend_from_slice(body);
    bytes
}

/// Sends `request` and returns the response's head, once it has all come.
fn exchange(address: SocketAddr, request: &[u8]) -> String {
    let mut stream = TcpStream::connect(address).expect("the server still accepts");
    stream
        .set_read_timeout(Some(ANSWER_WITHIN))
        .expect("a timeout");
    // The server may answer and close before reading all of a bad request.
    let _ = stream.write_all(request);
    let begun = Instant::now();
    let mut head = Vec::new();
    let mut buffer = [0; 4096];
    while !head.windows(4).any(|window| window == b"\r\n\r\n") {
        assert!(
            begun.elapsed() < ANSWER_WITHIN,
            "no whole response head within {ANSWER_WITHIN:?} to {:?}; so far {:?}",
            String::from_utf8_lossy(request),
            String::from_utf8_lossy(&head)
        );
        match stream.read(&mut buffer) {
            Ok(0) => break,
            Ok(read) => head.extend_from_slice(&buffer[..read]),
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
            Err(error) => panic!(
                "reading the answer to {:?} failed: {error}",
                String::from_utf8_lossy(request)
            ),
        }
    }
    String::from_utf8_lossy(&head).into_owned()
}

/// A header's value: a valid one, or whatever the input says but a line
/// break (which would end the header, not be its value).
fn value(input: &mut Unstructured, valid: &str) -> String {
    let mut value = match input.int_in_range(0u8..=3).unwrap_or(0) {
        0 | 1 => valid.to_owned(),
        2 => crate::arbitrary_answers::text(input),
        _ => {
            let length = input.int_in_range(0..=64).unwrap_or(0);
            String::from_utf8_lossy(input.bytes(length).unwrap_or_default()).into_owned()
        }
    };
    value.retain(|character| !matches!(character, '\r' | '\n'));
    value
}

/// A JWT as the input writes it: its header (its algorithm and key among
/// them), its claims and its signature, each base64url.
fn jwt(input: &mut Unstructured) -> String {
    let algorithm = *input
        .choose(&["RS256", "ES256", "EdDSA", "HS256", "none", "PS512"])
        .unwrap_or(&"RS256");
    let header = serde_json::json!({ "alg": algorithm, "typ": "at+jwt", "kid": crate::arbitrary_answers::text(input) });
    let claims = serde_json::json!({
        "iss": if input.arbitrary().unwrap_or(true) { UNREACHABLE_ISSUER.to_owned() } else { crate::arbitrary_answers::text(input) },
        "sub": crate::arbitrary_answers::text(input),
        "aud": crate::arbitrary_answers::text(input),
        "exp": input.arbitrary::<i64>().unwrap_or(0),
        "scope": "mcp:read",
    });
    let part = |bytes: &[u8]| URL_SAFE_NO_PAD.encode(bytes);
    let signature = input.bytes(64.min(input.len())).unwrap_or_default();
    format!(
        "Bearer {}.{}.{}",
        part(header.to_string().as_bytes()),
        part(claims.to_string().as_bytes()),
        part(signature)
    )
}

pub fn run(data: &[u8]) {
    let server = &*SERVER;
    let mut input = Unstructured::new(data);
    let method = *input
        .choose(&["POST", "GET", "DELETE", "PUT"])
        .unwrap_or(&"POST");
    let bearer = format!("Bearer {TOKEN}");
    let candidates: [(&str, &str); 8] = [
        ("Host", "127.0.0.1"),
        ("Origin", "https://app.example.com"),
        ("Authorization", &bearer),
        ("Mcp-Session-Id", &server.session),
        ("Last-Event-ID", "0"),
        (
            "traceparent",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        ),
        ("Mcp-Name", "fz:r"),
        ("MCP-Protocol-Version", "2025-06-18"),
    ];
    let mut headers = Vec::new();
    for (name, valid) in candidates {
        if name == "Host" || input.arbitrary().unwrap_or(true) {
            let written = match name == "Authorization" && input.ratio(1u8, 3u8).unwrap_or(false) {
                true => jwt(&mut input),
                false => value(&mut input, valid),
            };
            headers.push((name, written));
        }
    }
    let bodies: [&[u8]; 4] = [
        br#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"fz:r"}}"#,
        br#"{"jsonrpc":"2.0","id":1,"method":"resources/list"}"#,
        br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"fuzz","version":"1"}}}"#,
        br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    ];
    let body = match input.choose_index(bodies.len() + 1).unwrap_or(0) {
        index if index < bodies.len() => bodies[index].to_vec(),
        _ => input.take_rest().to_vec(),
    };
    let headers: Vec<(&str, &str)> = headers
        .iter()
        .map(|(name, value)| (*name, value.as_str()))
        .collect();
    let sent = request(method, &headers, &body);
    let head = exchange(server.address, &sent);
    let status = head
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse::<u16>().ok())
        .unwrap_or_else(|| {
            panic!(
                "no status line in {head:?} for {:?}",
                String::from_utf8_lossy(&sent)
            )
        });
    let retry = status == 503 && head.to_ascii_lowercase().contains("\r\nretry-after: ");
    assert!(
        status < 500 || retry,
        "status {status} for {:?}:\n{head}",
        String::from_utf8_lossy(&sent)
    );
    assert_eq!(PANICS.load(Ordering::SeqCst), 0, "the server panicked");
}
