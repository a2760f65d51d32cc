"""HTTP hardening, tried as a hostile client would: a legacy session opened
with one client's token cannot be used with another's; a client that never
finishes its headers is cut off; connections over the cap are closed while
the server keeps answering."""

import hashlib
import socket
import time
import urllib.request

import conftest
from conftest import INITIALIZE, ROOT, logged

ALICE = "alice-token-0123456789"
BOB = "bob-token-9876543210ab"
HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
READ = b'{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":"notes://notes/welcome"}}'
INITIALIZED = b'{"jsonrpc":"2.0","method":"notifications/initialized"}'


def tokens_file(tmp_path):
    tokens = tmp_path / "tokens.toml"
    digest = lambda token: hashlib.sha256(token.encode()).hexdigest()  # noqa: E731
    tokens.write_text(
        f'[clients.alice]\ntoken_sha256 = "{digest(ALICE)}"\nschemes = ["*"]\n'
        f'[clients.bob]\ntoken_sha256 = "{digest(BOB)}"\nschemes = ["*"]\n'
    )
    return tokens


def post(url, body, token, session=None):
    headers = {"Authorization": f"Bearer {token}", "MCP-Protocol-Version": "2025-11-25"}
    if session:
        headers["Mcp-Session-Id"] = session
    return conftest.post(url, body, headers)


def test_a_session_belongs_to_the_token_that_opened_it(serve, tmp_path):
    server = serve(args=("--tokens", str(tokens_file(tmp_path))))
    status, headers, _ = post(server.url, INITIALIZE, ALICE)
    assert status == 200
    session = headers["Mcp-Session-Id"]
    assert post(server.url, INITIALIZED, ALICE, session)[0] == 202

    status, _, body = post(server.url, READ, BOB, session)
    assert status == 404, body
    assert "session not found" in body
    assert "welcome" not in body.lower()

    status, _, body = post(server.url, READ, ALICE, session)
    assert status == 200
    assert "notes://notes/welcome" in body
    assert logged(server, "refused a request on a session another client opened")


def raw_connection(url):
    host, port = url.removeprefix("http://").removesuffix("/mcp").rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=30)


def test_a_client_that_never_finishes_its_headers_is_cut_off(server):
    stalled = raw_connection(server.url)
    stalled.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    started = time.monotonic()
    # The server closes the connection once its header timeout (10 s) passes.
    answer = stalled.recv(1024)
    assert answer == b"" or answer.startswith(b"HTTP/1.1 408"), answer
    closed_after = time.monotonic() - started
    stalled.close()
    assert 9 <= closed_after < 25, closed_after


def test_connections_over_the_cap_are_closed_and_the_server_keeps_answering(serve):
    server = serve(args=("--max-connections", "8"))
    held = [raw_connection(server.url) for _ in range(8)]
    for connection in held:
        connection.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    extra = raw_connection(server.url)
    extra.sendall(b"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    try:
        answer = extra.recv(1024)
    except ConnectionResetError:
        answer = b""  # closed before reading the request: a reset
    assert answer == b"", answer
    extra.close()
    assert logged(server, "8 connections are open, the most allowed")
    for connection in held:
        connection.close()
    deadline = time.monotonic() + 20
    while True:
        request = urllib.request.Request(server.url, data=INITIALIZE, method="POST", headers=HEADERS)
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                assert response.status == 200
                break
        except (urllib.error.URLError, ConnectionError):
            assert time.monotonic() < deadline, "the server never took a connection again"
            time.sleep(0.1)


def test_one_client_breaking_a_path_locks_out_nobody_else(serve, tmp_path):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "liar.wasm").write_bytes((ROOT / "target/test-plugins/liar.wasm").read_bytes())
    (plugins / "liar.toml").write_text("[limits]\ntimeout_ms = 200\n")
    server = serve(plugins=plugins, args=("--tokens", str(tokens_file(tmp_path)), "--response-cache-mib", "0"))

    sessions = {}
    for token in (ALICE, BOB):
        status, headers, _ = post(server.url, INITIALIZE, token)
        assert status == 200
        sessions[token] = headers["Mcp-Session-Id"]
        assert post(server.url, INITIALIZED, token, sessions[token])[0] == 202

    def read(token, uri):
        body = b'{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":"' + uri.encode() + b'"}}'
        return post(server.url, body, token, sessions[token])[2]

    for _ in range(3):
        assert "exceeded its time limit of 200 ms" in read(ALICE, "liar://spin")
    assert 'path \\"spin\\" of plugin liar is quarantined' in read(ALICE, "liar://spin")
    assert "a lie" in read(BOB, "liar://honest")
    assert "a lie" in read(ALICE, "liar://grows")


def test_a_client_holds_at_most_64_sessions(serve, tmp_path):
    server = serve(args=("--tokens", str(tokens_file(tmp_path))))
    sessions = []
    for _ in range(64):
        status, headers, _ = post(server.url, INITIALIZE, ALICE)
        assert status == 200
        sessions.append(headers["Mcp-Session-Id"])
    status, _, body = post(server.url, INITIALIZE, ALICE)
    assert status == 429, body
    assert "client alice holds 64 sessions, the most allowed; close one first" in body
    # Another client is not held back by alice's sessions.
    assert post(server.url, INITIALIZE, BOB)[0] == 200

    closing = urllib.request.Request(
        server.url,
        method="DELETE",
        headers={"Authorization": f"Bearer {ALICE}", "Mcp-Session-Id": sessions[0]},
    )
    with urllib.request.urlopen(closing, timeout=30) as response:
        assert 200 <= response.status < 300
    assert post(server.url, INITIALIZE, ALICE)[0] == 200
