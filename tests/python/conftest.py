"""Shared by the HTTP tests: `resmux serve --http` on a free loopback port."""

import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

ROOT = Path(__file__).resolve().parents[2]
BINARY = Path(os.environ.get("RESMUX_BIN", ROOT / "target/release/resmux"))
PLUGINS = ROOT / "target/plugins"
INITIALIZE = (
    b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25",'
    b'"capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}'
)


# The `_meta` every 2026-07-28 request carries.
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}
# With a weight in Accept, rmcp reads the header and resmux leaves a read to
# rmcp's HTTP service rather than answering it beside it
# (host/src/transport/http_reads.rs): the same read, answered the old way.
THROUGH_RMCP = {"Accept": "application/json;q=1, text/event-stream"}


async def all_resource_uris(client):
    """The URIs of every page of `client`'s resource listing, in order."""
    uris, cursor = [], None
    while True:
        page = await client.list_resources(cursor=cursor)
        uris += [resource.uri for resource in page.resources]
        cursor = page.next_cursor
        if cursor is None:
            return uris


def mcp_request(url, body, headers):
    """The POST of the JSON-RPC `body` an MCP client would send, with extra
    `headers`."""
    return urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={"Content-Type": "application/json", "Accept": "application/json, text/event-stream", **headers},
    )


def answer(request):
    """Sends `request`; returns the HTTP status, the response headers and
    the body, whatever the status."""
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.headers, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read().decode()


def post(url, body, headers):
    """POSTs the JSON-RPC `body` as an MCP client would, with extra
    `headers`; returns the HTTP status, the response headers and the body."""
    return answer(mcp_request(url, body, headers))


def get(url, headers=None):
    """GETs `url` with `headers`: the status, the headers and the body."""
    return answer(urllib.request.Request(url, headers=headers or {}))


def open_session(url, headers=None):
    """Opens a 2025-11-25 session on `url` with extra `headers` (a bearer
    token, say); returns the headers of its requests, those among them."""
    headers = headers or {}
    status, response_headers, body = post(url, INITIALIZE, headers)
    assert status == 200, body
    opened = {**headers, "Mcp-Session-Id": response_headers["Mcp-Session-Id"], "MCP-Protocol-Version": "2025-11-25"}
    initialized = b'{"jsonrpc":"2.0","method":"notifications/initialized"}'
    status, _, body = post(url, initialized, opened)
    assert status == 202, body
    return opened


def eventually(observe, within=20, every=0.05, until=bool, process=None):
    """The first value `observe()` gives of which `until` holds (by default:
    a true one), asked every `every` seconds for `within` seconds; the last
    one it gave if none, for the caller's assertion to show. `process`, a
    helper the observation waits on, must not exit meanwhile: if it does,
    that fails the test at once, with what it wrote to a piped stderr."""
    deadline = time.monotonic() + within
    while True:
        value = observe()
        if until(value) or time.monotonic() > deadline:
            return value
        if process is not None and process.poll() is not None:
            said = process.stderr.read() if process.stderr else ""
            raise AssertionError(f"{process.args[0]} exited with {process.returncode}: {said}")
        time.sleep(every)


def logged(server, text, within=20):
    """Whether `text` reaches the server's log within `within` seconds (the
    log is drained by another thread)."""
    return eventually(lambda: any(text in line for line in server.log), within)


def audit_lines(path, count, within=20):
    """The lines of the audit log at `path`, parsed, once it holds at least
    `count` whole ones: resmux appends them from a thread of its own, so a
    line may reach the file just after its answer reached the client."""

    def whole_lines(text):
        return text.split("\n")[:-1]

    text = eventually(
        lambda: path.read_text() if path.exists() else "",
        within,
        every=0.02,
        until=lambda written: len(whole_lines(written)) >= count,
    )
    lines = whole_lines(text)
    assert len(lines) >= count, f"{count} audit lines not written within {within} s: {text!r}"
    return [json.loads(line) for line in lines]


def connect(server, token, mode="auto"):
    """An MCP client of `server` over Streamable HTTP with `token` as its
    bearer, in `mode` ("auto" or "legacy")."""
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    return Client(streamable_http_client(server.url, http_client=http), mode=mode, cache=None)


def post_initialize(url, headers):
    """POSTs a 2025-11-25 `initialize` with extra `headers`; returns the HTTP
    status and the response headers."""
    status, response_headers, _ = post(url, INITIALIZE, headers)
    return status, response_headers


class Server:
    """`resmux serve --http` on a free loopback port, serving `plugins` with
    `args` added; stderr is drained as it comes so the server never blocks on
    a full pipe."""

    def __init__(self, plugins=PLUGINS, args=(), env=None, address="127.0.0.1:0"):
        self.process = subprocess.Popen(
            [str(BINARY), "serve", "--plugins", str(plugins), "--page-size", "2", "--http", address, *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={
                **os.environ,
                "RESMUX_CACHE_DIR": str(ROOT / "target/test-cache"),
                "RUST_LOG": "info",
                **(env or {}),
            },
            text=True,
        )
        self.log = []
        found = threading.Event()

        def drain():
            for line in self.process.stderr:
                self.log.append(line)
                if re.search(r"at http://[\d.:]+/mcp", line):
                    found.set()

        self.drainer = threading.Thread(target=drain, daemon=True)
        self.drainer.start()
        assert found.wait(60), "".join(self.log)
        self.url = re.search(r"(http://[\d.:]+/mcp)", "".join(self.log)).group(1)

    def stop(self):
        self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(30)
        self.drainer.join(30)
        return code

    def kill(self):
        if self.process.poll() is None:
            self.process.kill()


@pytest.fixture
def serve():
    """Starts servers on demand; kills whatever is left at the end."""
    assert BINARY.exists() and PLUGINS.exists(), "run scripts/build first"
    started = []

    def start(**options):
        server = Server(**options)
        started.append(server)
        return server

    yield start
    for server in started:
        server.kill()


@pytest.fixture
def live_folder(tmp_path):
    """A plugin folder with `notes`, and `files` serving a data folder
    holding `a.txt` (its change report asked for every 200 ms): the
    folder and the data folder."""
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.txt").write_text("first")
    shutil.copy(PLUGINS / "notes.wasm", plugins / "notes.wasm")
    shutil.copy(PLUGINS / "files.wasm", plugins / "files.wasm")
    (plugins / "files.toml").write_text(
        f'[config]\nroot = "/data"\n[[files]]\nhost = "{data}"\nguest = "/data"\n[changes]\ninterval_ms = 200\n'
    )
    return plugins, data


@pytest.fixture
def server(serve):
    return serve()


@pytest.fixture
def provider_and_resource(tmp_path):
    """A real OpenID provider (tests/node/idp.mjs) and the resource URI its
    tokens are for: a free loopback port's /mcp."""
    from idp import NODE, Provider, free_port

    assert NODE.exists(), "run npm ci in tests/node first"
    resource = f"http://127.0.0.1:{free_port()}/mcp"
    provider = Provider(resource, tmp_path)
    yield provider, resource
    provider.stop()


@pytest.fixture
def unanswering():
    """An issuer that takes connections and never answers on them
    (idp.Unanswering)."""
    from idp import Unanswering

    issuer = Unanswering()
    yield issuer
    issuer.close()
