"""HTTP hardening, tried as a hostile client would: a legacy session opened
with one client's token cannot be used with another's; a client that never
finishes its headers, or trickles its body in, is cut off; connections over
the cap are closed while the server keeps answering; one source address
flooding the MCP port or the metrics listener with stalled connections holds
its share of them, and another source's `initialize` and the probes keep
answering."""

import hashlib
import select
import socket
import threading
import time
import urllib.request

import conftest
from conftest import INITIALIZE, ROOT, logged
from idp import free_port

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


def address_of(url):
    host, port = url.removeprefix("http://").removesuffix("/mcp").rsplit(":", 1)
    return host, int(port)


def raw_connection(url):
    return socket.create_connection(address_of(url), timeout=30)


class Flood:
    """A client at the loopback address `source` (Linux routes all of
    127.0.0.0/8 to loopback, so it is a source of its own) that keeps `count`
    connections to `address` stalled in their headers, opening a new one as
    soon as one is closed: it holds as many as resmux lets it, for as long as
    it runs."""

    STALLED = b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n"

    def __init__(self, address, source, count):
        self.address, self.source, self.count = address, source, count
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *_):
        self.stop.set()
        self.thread.join(30)

    def open_one(self):
        connection = socket.create_connection(self.address, timeout=5, source_address=(self.source, 0))
        try:
            connection.sendall(self.STALLED)
        except OSError:  # closed by resmux before the headers went out
            connection.close()
            return None
        return connection

    def run(self):
        held = []
        while not self.stop.is_set():
            for _ in range(self.count - len(held)):
                try:
                    connection = self.open_one()
                except OSError:
                    continue
                if connection is not None:
                    held.append(connection)
            # A connection resmux closed reads as the end (or a reset).
            closed, _, _ = select.select(held, [], [], 0.05)
            for connection in closed:
                held.remove(connection)
                connection.close()
        for connection in held:
            connection.close()


def answered_within(url, seconds, data=None):
    """The status and body of a GET (or a POST of `data`) from 127.0.0.1,
    which must answer within `seconds`."""
    request = urllib.request.Request(url, data=data, method="POST" if data else "GET", headers=HEADERS)
    started = time.monotonic()
    with urllib.request.urlopen(request, timeout=seconds) as response:
        status, body = response.status, response.read().decode()
    assert time.monotonic() - started < seconds
    return status, body


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


def test_a_request_body_that_trickles_in_is_cut_off(server):
    host, port = address_of(server.url)
    trickling = raw_connection(server.url)
    trickling.sendall(
        f"POST /mcp HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        "Accept: application/json, text/event-stream\r\nContent-Length: 1000\r\n\r\n".encode()
    )
    trickling.settimeout(2)
    started = time.monotonic()
    answer = b""
    # One byte of the body every 2 s, until resmux answers or closes.
    while not answer:
        try:
            answer = trickling.recv(4096)
            if not answer:
                break
        except TimeoutError:
            assert time.monotonic() - started < 40, "the trickling body was never cut off"
            trickling.sendall(b" ")
    cut_after = time.monotonic() - started
    trickling.settimeout(10)
    try:
        while chunk := trickling.recv(4096):
            answer += chunk
    except ConnectionResetError:
        pass
    trickling.close()
    assert answer.startswith(b"HTTP/1.1 408"), answer
    assert b"connection: close" in answer.lower(), answer
    assert (
        b"the request body arrived too slowly: a body may take 10 s, and 1 s more for each 4096 bytes that arrive"
        in answer
    ), answer
    # 10 s, and a few bytes' worth more: well under a second.
    assert 9 <= cut_after < 25, cut_after
    assert logged(server, "cut off a request whose body arrived too slowly")


def test_one_source_flooding_stalled_connections_shuts_no_other_source_out(serve):
    server = serve(args=("--max-connections", "16"))
    probe = server.url.replace("/mcp", "/healthz")
    # The flood asks for all 16; its share is 4 (an eighth, at least 4).
    with Flood(address_of(server.url), "127.0.0.2", 16):
        assert logged(server, "closed a connection: source 127.0.0.2 holds 4 connections, the most one source may hold")
        for _ in range(5):
            status, body = answered_within(server.url, 5, INITIALIZE)
            assert status == 200 and '"serverInfo"' in body, body
            assert answered_within(probe, 5) == (200, "live\n")


def test_the_metrics_listener_answers_probes_while_one_source_floods_it(serve):
    metrics = ("127.0.0.1", free_port())
    server = serve(args=("--metrics", f"{metrics[0]}:{metrics[1]}"))
    base = f"http://{metrics[0]}:{metrics[1]}"
    # The listener holds 64 connections, 8 from one source.
    with Flood(metrics, "127.0.0.2", 64):
        assert logged(server, "closed a connection: source 127.0.0.2 holds 8 connections, the most one source may hold")
        for _ in range(5):
            assert answered_within(f"{base}/healthz", 5) == (200, "live\n")
            assert answered_within(f"{base}/readyz", 5) == (200, "ready\n")
            status, _ = answered_within(f"{base}/metrics", 5)
            assert status == 200


def test_connections_over_the_cap_are_closed_and_the_server_keeps_answering(serve):
    # One source may hold all 8 here, so that it meets the cap.
    server = serve(args=("--max-connections", "8", "--max-connections-per-source", "8"))
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
