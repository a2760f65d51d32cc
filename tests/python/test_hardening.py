"""HTTP hardening, tried as a hostile client would: a legacy session opened
with one client's token cannot be used with another's; a client that never
finishes its headers, or trickles its body in, is cut off; over the cap, the
connection that has waited longest for its request is closed to make room
for a newcomer. Flooding the MCP port or the metrics listener with stalled
connections, or an authenticated client trickling bodies on more
connections than the cap, from the very address the victim uses
(127.0.0.1, as behind a load balancer), leaves another client's
`initialize` and the probes answering, and holds the client to its share.
When every connection is busy with a request, the listener's or one
source's (a load balancer's), one more answers the probes alone, and MCP
with 503."""

import hashlib
import json
import multiprocessing
import os
import select
import socket
import time
import urllib.request

import conftest
import pytest
from conftest import INITIALIZE, ROOT, eventually, logged
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
    """A client at the loopback address `source` that keeps `count`
    connections to `address` open, each sending `opening` (by default
    headers it never finishes) and then, every `trickle` seconds if given,
    one byte more, opening a new one as soon as one is closed: it holds as
    many as resmux lets it, for as long as it runs. (Linux routes all of
    127.0.0.0/8 to loopback, so another address there is a source of its
    own; 127.0.0.1 is the victim's own.) It runs in a process of its own, as
    an attacker's would, sharing no interpreter lock with the victim, at the
    lowest priority (see `run`), and counts the connections resmux closed
    (`closed`)."""

    STALLED = b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n"

    def __init__(self, address, source, count, opening=STALLED, trickle=None):
        self.address, self.source, self.count = address, source, count
        self.opening, self.trickle = opening, trickle
        self.stop = multiprocessing.Event()
        # How many of its connections resmux has closed so far.
        self.closed = multiprocessing.Value("Q", 0)
        self.process = multiprocessing.Process(target=self.run, daemon=True)

    def __enter__(self):
        self.process.start()
        return self

    def __exit__(self, *_):
        self.stop.set()
        self.process.join(30)

    def closes_more(self, than, since, within=20):
        """Whether resmux closes more than `than` of the flood's connections
        after the first `since`, within `within` seconds. The flood counts
        a close when its turn comes, at the lowest priority, so its count
        lags behind resmux."""
        return eventually(lambda: self.closed.value - since > than, within)

    def open_one(self):
        connection = socket.create_connection(self.address, timeout=5, source_address=(self.source, 0))
        try:
            connection.sendall(self.opening)
        except OSError:  # closed by resmux before the headers went out
            connection.close()
            return None
        return connection

    def run(self):
        # An attacker's connections come from its own machine: here, where
        # it shares the victim's cores, it yields them to the victim rather
        # than delaying the victim's request after its connection.
        os.nice(19)
        held = []
        trickled = time.monotonic()
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
            if self.trickle and time.monotonic() - trickled >= self.trickle:
                trickled = time.monotonic()
                for connection in held:
                    try:
                        connection.sendall(b" ")
                    except OSError:
                        closed.append(connection)
            for connection in set(closed):
                held.remove(connection)
                connection.close()
            with self.closed.get_lock():
                self.closed.value += len(set(closed))
        for connection in held:
            connection.close()


def answered_within(url, seconds, data=None, headers=None):
    """The status and body of a GET (or a POST of `data`) from 127.0.0.1
    with extra `headers`, which must answer within `seconds`."""
    request = urllib.request.Request(
        url, data=data, method="POST" if data else "GET", headers={**HEADERS, **(headers or {})}
    )
    started = time.monotonic()
    with urllib.request.urlopen(request, timeout=seconds) as response:
        status, body = response.status, response.read().decode()
    assert time.monotonic() - started < seconds
    return status, body


def initialize_result(body):
    """The result of the `initialize` (id 1) a response answers: its JSON
    body, or the one message of its event stream."""
    if body.lstrip().startswith("{"):
        answer = json.loads(body)
    else:
        (answer,) = [
            json.loads(line[len("data:") :])
            for line in body.splitlines()
            if line.startswith("data:") and line[len("data:") :].strip()
        ]
    assert answer["id"] == 1, body
    return answer["result"]


# What resmux logs when it closes a connection to make room for a newcomer.
EVICTED = "closed the connection that had waited longest without finishing a request, to make room: "


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


def test_a_flood_of_stalled_connections_from_the_victim_s_own_address_shuts_nobody_out(serve):
    # As behind a load balancer, every client has one address, whose share
    # is the whole cap.
    server = serve(args=("--max-connections", "16", "--max-connections-per-source", "16"))
    probe = server.url.replace("/mcp", "/healthz")
    # The flood asks for twice the cap, from the victim's address, and
    # reopens each connection as soon as resmux closes it.
    with Flood(address_of(server.url), "127.0.0.1", 32) as flood:
        assert logged(server, EVICTED + "source 127.0.0.1 holds 16 connections, the most one source may hold")
        closed_before = flood.closed.value
        for _ in range(5):
            status, body = answered_within(server.url, 5, INITIALIZE)
            assert status == 200, body
            assert initialize_result(body)["serverInfo"]["name"] == "resmux", body
            assert answered_within(probe, 5) == (200, "live\n")
        # The flood kept on meanwhile: resmux goes on closing more than the
        # whole share of its connections.
        assert flood.closes_more(than=16, since=closed_before)


def trickling_post(url, token):
    """The opening of a POST to `url` as the client of `token` whose body,
    1000 bytes long, is still to come."""
    host, port = address_of(url)
    return (
        f"POST /mcp HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {token}\r\n"
        "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
        "Content-Length: 1000\r\n\r\n"
    ).encode()


def test_a_client_trickling_bodies_on_more_connections_than_the_cap_is_held_to_its_share(serve, tmp_path):
    server = serve(
        args=(
            "--tokens",
            str(tokens_file(tmp_path)),
            "--max-connections",
            "16",
            "--max-connections-per-source",
            "16",
            "--max-connections-per-client",
            "4",
        )
    )
    # alice, a client with a token, holds 24 POSTs whose bodies come a byte
    # every 2 s, from the address bob uses too.
    with Flood(address_of(server.url), "127.0.0.1", 24, opening=trickling_post(server.url, ALICE), trickle=2):
        assert logged(server, EVICTED + "client alice holds 4 connections, the most one client may hold")
        for _ in range(5):
            status, body = answered_within(server.url, 5, INITIALIZE, {"Authorization": f"Bearer {BOB}"})
            assert status == 200, body
            assert initialize_result(body)["serverInfo"]["name"] == "resmux", body


def test_the_metrics_listener_answers_probes_while_their_own_address_floods_it(serve):
    metrics = ("127.0.0.1", free_port())
    server = serve(args=("--metrics", f"{metrics[0]}:{metrics[1]}"))
    base = f"http://{metrics[0]}:{metrics[1]}"
    # The listener holds 64 connections, from any source: the flood asks
    # for more than all of them, from the prober's own address.
    with Flood(metrics, "127.0.0.1", 69):
        assert logged(server, EVICTED + "source 127.0.0.1 holds 64 connections, the most one source may hold")
        for _ in range(5):
            assert answered_within(f"{base}/healthz", 5) == (200, "live\n")
            assert answered_within(f"{base}/readyz", 5) == (200, "ready\n")
            status, body = answered_within(f"{base}/metrics", 5)
            assert status == 200
            assert "# TYPE" in body, body


def closed_by_resmux(connection):
    """Whether resmux closes `connection` (its read ends, or is reset)
    within 10 s; a connection still open then reads as a timeout."""
    connection.settimeout(10)
    try:
        return connection.recv(1024) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def healthz_on(connection):
    """The answer to a `/healthz` asked on `connection`, which stays open."""
    connection.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    connection.settimeout(5)
    answer = b""
    while not answer.endswith(b"\r\n\r\nlive\n"):
        chunk = connection.recv(4096)
        assert chunk, answer  # closed before the whole answer came
        answer += chunk
    return answer


def test_over_the_cap_the_connection_waiting_longest_makes_room_for_a_newcomer(serve):
    # One source may hold all 8 here, so that it meets the cap.
    server = serve(args=("--max-connections", "8", "--max-connections-per-source", "8"))
    held = []
    for _ in range(8):
        connection = raw_connection(server.url)
        connection.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        held.append(connection)
    # A newcomer that sends its request gets in and is answered, and the
    # connection that has waited longest is closed for it, not the newcomer.
    first = raw_connection(server.url)
    assert healthz_on(first).startswith(b"HTTP/1.1 200 "), "the newcomer was not answered"
    assert closed_by_resmux(held[0])
    assert logged(server, EVICTED + "source 127.0.0.1 holds 8 connections, the most one source may hold")
    # The first newcomer, answered, stays open and waits for its next
    # request, since just now: the next newcomer takes the second place.
    second = raw_connection(server.url)
    assert healthz_on(second).startswith(b"HTTP/1.1 200 ")
    assert closed_by_resmux(held[1])
    status, body = answered_within(server.url, 5, INITIALIZE)
    assert status == 200, body
    assert initialize_result(body)["serverInfo"]["name"] == "resmux", body
    assert closed_by_resmux(held[2])
    # Both newcomers are still open: each answers its next request.
    assert healthz_on(first).startswith(b"HTTP/1.1 200 ")
    assert healthz_on(second).startswith(b"HTTP/1.1 200 ")
    for connection in [*held, first, second]:
        connection.close()


def event_stream(url, session, source):
    """A connection from the loopback address `source` holding `session`'s
    event stream open (a GET of `/mcp`, answered and never ended): busy
    with a request, it is never closed to make room."""
    connection = socket.create_connection(address_of(url), timeout=30, source_address=(source, 0))
    host, port = address_of(url)
    connection.sendall(
        (
            f"GET /mcp HTTP/1.1\r\nHost: {host}:{port}\r\nAccept: text/event-stream\r\n"
            f"Mcp-Session-Id: {session['Mcp-Session-Id']}\r\nMCP-Protocol-Version: 2025-11-25\r\n\r\n"
        ).encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = connection.recv(4096)
        assert chunk, head  # closed before its answer's head came
        head += chunk
    assert head.startswith(b"HTTP/1.1 200 "), head
    return connection


def get_once(url, path):
    """The whole answer to a GET of `path` on a new connection, which the
    answer closes. (A GET: a probe-only connection is answered before any
    body is read, and a body left unread would turn its close into a
    reset.)"""
    connection = raw_connection(url)
    connection.sendall(
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\nConnection: close\r\n\r\n".encode()
    )
    answer = b""
    while chunk := connection.recv(4096):
        answer += chunk
    connection.close()
    return answer


@pytest.mark.parametrize("share", ["total", "source"])
def test_when_every_connection_is_busy_one_more_answers_the_probes_alone(serve, share):
    # The streams hold every place: of the listener's total (from another
    # address than the newcomers'), or of the source's share (as behind a
    # load balancer, whose health checks come from the address of the
    # streams it carries).
    total, source = {"total": ("4", "127.0.0.2"), "source": ("64", "127.0.0.1")}[share]
    server = serve(args=("--max-connections", total, "--max-connections-per-source", "4"))
    sessions = [conftest.open_session(server.url) for _ in range(4)]
    streams = [event_stream(server.url, session, source) for session in sessions]
    # Each of these comes on a connection let in past the total, for the
    # probes alone: MCP, at `/mcp` and below it, is refused with 503.
    for path in ("/mcp", "/mcp/x"):
        answer = get_once(server.url, path)
        assert answer.startswith(b"HTTP/1.1 503 "), answer
        assert b"connection: close\r\n" in answer.lower(), answer
        assert answer.endswith(b"this one answers only /healthz and /readyz\n"), answer
    assert answered_within(server.url.replace("/mcp", "/healthz"), 5) == (200, "live\n")
    # One stream ends: once resmux sees it closed, its place is free, and
    # MCP answers again.
    streams.pop().close()
    eventually(lambda: not get_once(server.url, "/mcp").startswith(b"HTTP/1.1 503 "), 10, every=0.01)
    status, body = answered_within(server.url, 5, INITIALIZE)
    assert status == 200, body
    assert initialize_result(body)["serverInfo"]["name"] == "resmux", body
    for stream in streams:
        stream.close()


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
