//! The network allowlist from inside: the `liar` plugin fetches URLs, follows
//! redirects, resolves names and opens TCP connections, and a loopback HTTP
//! server stands in for the network and counts who reached it.

use resmux_tests::{Folder, HttpStub, RawServer, Reply, error_message};

/// The stand-in for the network: `/hello` answers a greeting, `/to/URL`
/// redirects to `URL`.
fn loopback() -> HttpStub {
    HttpStub::start(|path| match path.strip_prefix("/to/") {
        Some(location) => Reply::new("302 Found", "").header("Location", location),
        None => Reply::new("200 OK", "hello from loopback"),
    })
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
    let server_side = loopback();
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
    // Without an http or https entry, wasi:http is not linked at all: the
    // first call into it fails the plugin's call.
    let unlinked = server.read("nogrant://fetch").await.unwrap();
    assert!(
        error_message(&unlinked).contains(
            "wasi:http/types@0.2.12#[constructor]fields: the plugin has no http or https grant, so wasi:http is not linked"
        ),
        "{unlinked}"
    );
    for (scheme, refusal) in [
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
    let server_side = loopback();
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
    let server_side = loopback();
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
            "ungrantedname",
            connect(
                format!("localhost:{port}"),
                &[&format!("tcp://127.0.0.1:{port}")],
            ),
        ),
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
    // A name no socket entry names answers as if it did not exist, even for
    // a plugin that may connect to the very address it resolves to.
    for scheme in ["httplookup", "nogrant", "ungrantedname"] {
        let outcome = server.read_text(&format!("{scheme}://lookup")).await;
        assert!(outcome.starts_with("error: "), "{scheme}: {outcome}");
    }
    let resolved = server.read_text("byname://lookup").await;
    assert!(resolved.starts_with("resolved "), "{resolved}");
    notes_still_serve(&mut server).await;
    let stderr = server.stop().await.unwrap();
    assert!(stderr.contains("denied a socket use"), "{stderr}");
    // Refused: the connect by name of nogrant, then the three lookups.
    assert_eq!(
        stderr
            .matches("refused a name lookup: no socket grant names it name=\"localhost\"")
            .count(),
        4,
        "{stderr}"
    );
}
