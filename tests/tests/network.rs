//! The network allowlist from inside: the `liar` plugin fetches URLs, follows
//! redirects, resolves names and opens TCP connections, and a loopback HTTP
//! server stands in for the network and counts who reached it.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use resmux_tests::{Folder, RawServer};

/// A loopback HTTP/1.1 server: `/hello` answers a greeting, `/to/URL`
/// redirects to `URL`; it counts the connections it accepted.
struct Loopback {
    port: u16,
    connections: Arc<AtomicUsize>,
}

impl Loopback {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let connections = Arc::new(AtomicUsize::new(0));
        let counted = connections.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                counted.fetch_add(1, Ordering::SeqCst);
                let mut request_line = String::new();
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                if reader.read_line(&mut request_line).is_err() {
                    continue;
                }
                let mut header = String::new();
                while reader.read_line(&mut header).is_ok_and(|read| read > 2) {
                    header.clear();
                }
                let path = request_line.split(' ').nth(1).unwrap_or("/");
                let answer = match path.strip_prefix("/to/") {
                    Some(location) => format!(
                        "HTTP/1.1 302 Found\r\nLocation: {location}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    ),
                    None => "HTTP/1.1 200 OK\r\nContent-Length: 19\r\nConnection: close\r\n\r\nhello from loopback".into(),
                };
                let _ = stream.write_all(answer.as_bytes());
            }
        });
        Self { port, connections }
    }

    fn url(&self, host: &str, path: &str) -> String {
        format!("http://{host}:{}{path}", self.port)
    }

    /// The connections accepted so far, once `at_least` have been (or five
    /// seconds passed): the kernel completes a connection before the server
    /// thread gets round to accepting it.
    fn connections(&self, at_least: usize) -> usize {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while self.connections.load(Ordering::SeqCst) < at_least
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        self.connections.load(Ordering::SeqCst)
    }
}

/// A folder with one `liar` mount per case, and the well-behaved `notes`:
/// `mounts` pairs a scheme with the manifest lines that follow `component`
/// and `scheme`.
fn liar_mounts(mounts: &[(&str, String)]) -> Folder {
    let folder = Folder::new();
    folder.plugin("liar", "liar").plugin("notes", "notes");
    for (scheme, lines) in mounts {
        folder.manifest(
            scheme,
            &format!("component = \"liar.wasm\"\nscheme = \"{scheme}\"\n{lines}"),
        );
    }
    folder
}

/// The well-behaved plugin still answers.
async fn notes_still_serve(server: &mut RawServer) {
    let welcome = server.read_text("notes://notes/welcome").await;
    assert!(welcome.contains("Welcome"), "{welcome}");
}

fn grant(fetch: &str, allow: &[&str]) -> String {
    format!("[config]\nfetch = \"{fetch}\"\n[network]\nallow = {allow:?}\n")
}

#[tokio::test]
async fn http_reaches_only_allowlisted_hosts_and_named_private_addresses() {
    let server_side = Loopback::start();
    let port = server_side.port;
    let hello = |host: &str| server_side.url(host, "/hello");
    let folder = liar_mounts(&[
        (
            "granted",
            grant(&hello("127.0.0.1"), &[&format!("http://127.0.0.1:{port}")]),
        ),
        (
            "nogrant",
            format!("[config]\nfetch = \"{}\"\n", hello("127.0.0.1")),
        ),
        (
            "otherhost",
            grant(&hello("127.0.0.1"), &["https://api.example.com"]),
        ),
        (
            "otherport",
            grant(&hello("127.0.0.1"), &["http://127.0.0.1:1"]),
        ),
        (
            "byname",
            grant(&hello("localhost"), &[&format!("http://localhost:{port}")]),
        ),
        ("anyhost", grant(&hello("127.0.0.1"), &["http://*:*"])),
        (
            "tls",
            grant(&hello("127.0.0.1"), &[&format!("https://127.0.0.1:{port}")]),
        ),
    ]);
    let mut server = RawServer::legacy(folder.path()).await.unwrap();
    assert_eq!(
        server.read_text("granted://fetch").await,
        "status 200 after 0 redirects: hello from loopback"
    );
    assert_eq!(server_side.connections(1), 1);
    for (scheme, refusal) in [
        ("nogrant", "HttpRequestDenied"),
        ("otherhost", "HttpRequestDenied"),
        ("otherport", "HttpRequestDenied"),
        ("tls", "HttpRequestDenied"),
        ("byname", "DestinationIpProhibited"),
        ("anyhost", "DestinationIpProhibited"),
    ] {
        let outcome = server.read_text(&format!("{scheme}://fetch")).await;
        assert!(outcome.contains(refusal), "{scheme}: {outcome}");
    }
    assert_eq!(
        server_side.connections(1),
        1,
        "a refused request reached the server"
    );
    notes_still_serve(&mut server).await;
    let stderr = server.stop().await.unwrap();
    assert!(
        stderr.contains("not on the plugin's network allowlist")
            && stderr.contains("resolves only to addresses that are not public"),
        "{stderr}"
    );
}

#[tokio::test]
async fn every_redirect_is_checked_again() {
    let server_side = Loopback::start();
    let port = server_side.port;
    let allow = [format!("http://127.0.0.1:{port}")];
    let allow: Vec<&str> = allow.iter().map(String::as_str).collect();
    let to = |target: &str| server_side.url("127.0.0.1", &format!("/to/{target}"));
    let folder = liar_mounts(&[
        (
            "inside",
            grant(&to(&server_side.url("127.0.0.1", "/hello")), &allow),
        ),
        (
            "byname",
            grant(&to(&server_side.url("localhost", "/hello")), &allow),
        ),
        ("outside", grant(&to("http://10.1.2.3/"), &allow)),
    ]);
    let mut server = RawServer::legacy(folder.path()).await.unwrap();
    assert_eq!(
        server.read_text("inside://fetch").await,
        "status 200 after 1 redirects: hello from loopback"
    );
    assert_eq!(server_side.connections(2), 2);
    for scheme in ["byname", "outside"] {
        let outcome = server.read_text(&format!("{scheme}://fetch")).await;
        assert!(
            outcome.starts_with("after 1 redirects: ") && outcome.contains("HttpRequestDenied"),
            "{scheme}: {outcome}"
        );
    }
    notes_still_serve(&mut server).await;
    let stderr = server.stop().await.unwrap();
    assert_eq!(
        server_side.connections(4),
        4,
        "only the first hops connect: {stderr}"
    );
}

#[tokio::test]
async fn sockets_need_their_own_grant_and_http_grants_open_none() {
    let server_side = Loopback::start();
    let port = server_side.port;
    let connect = |target: String, allow: &[&str]| {
        format!("[config]\nconnect = \"{target}\"\n[network]\nallow = {allow:?}\n")
    };
    let folder = liar_mounts(&[
        (
            "tcpgrant",
            connect(
                format!("127.0.0.1:{port}"),
                &[&format!("tcp://127.0.0.1:{port}")],
            ),
        ),
        (
            "httpgrant",
            connect(
                format!("127.0.0.1:{port}"),
                &[&format!("http://127.0.0.1:{port}")],
            ),
        ),
        (
            "otherport",
            connect(format!("127.0.0.1:{port}"), &["tcp://127.0.0.1:1"]),
        ),
        (
            "byname",
            connect(
                format!("localhost:{port}"),
                &[&format!("tcp://localhost:{port}")],
            ),
        ),
        ("nogrant", connect(format!("localhost:{port}"), &[])),
        (
            "httplookup",
            connect(
                format!("localhost:{port}"),
                &[&format!("http://localhost:{port}")],
            ),
        ),
    ]);
    let mut server = RawServer::legacy(folder.path()).await.unwrap();
    assert_eq!(server.read_text("tcpgrant://connect").await, "connected");
    assert_eq!(server_side.connections(1), 1);
    for scheme in ["httpgrant", "otherport", "byname", "nogrant"] {
        let outcome = server.read_text(&format!("{scheme}://connect")).await;
        assert!(outcome.starts_with("error: "), "{scheme}: {outcome}");
    }
    assert_eq!(
        server_side.connections(1),
        1,
        "a refused socket reached the server"
    );
    for scheme in ["httplookup", "nogrant"] {
        let outcome = server.read_text(&format!("{scheme}://lookup")).await;
        assert!(outcome.starts_with("error: "), "{scheme}: {outcome}");
    }
    let resolved = server.read_text("byname://lookup").await;
    assert!(resolved.starts_with("resolved "), "{resolved}");
    notes_still_serve(&mut server).await;
    let stderr = server.stop().await.unwrap();
    assert!(stderr.contains("denied a socket use"), "{stderr}");
}
