"""resmux over Streamable HTTP (`serve --http`), seen by the official Python
SDK in both eras, plus the checks of the wire: `Host` and `Origin` against DNS
rebinding, and a graceful stop on SIGTERM."""

import asyncio
import json
import os
import shutil
import signal
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from mcp.client.client import Client
from mcp.shared.exceptions import MCPError

from conftest import (
    INITIALIZE,
    PLUGINS,
    ROOT,
    THROUGH_RMCP,
    all_resource_uris,
    eventually,
    mcp_request,
    post,
    post_initialize,
)


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_both_eras_page_read_and_get_their_not_found_code(server, mode):
    async def scenario():
        async with Client(server.url, mode=mode, cache=None) as client:
            uris = await all_resource_uris(client)
            note = await client.read_resource("notes://notes/welcome")
            with pytest.raises(MCPError) as missing:
                await client.read_resource("notes://notes/missing")
            return client.session.protocol_version, uris, note.contents[0].text, missing.value

    version, uris, text, missing = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert version == {"auto": "2026-07-28", "legacy": "2025-11-25"}[mode]
    assert len(uris) == len(set(uris)) == 40
    assert text.startswith("# Welcome")
    assert missing.code == {"auto": -32602, "legacy": -32002}[mode]
    assert missing.data == {"uri": "notes://notes/missing"}


def test_foreign_host_and_origin_are_refused(server):
    port = server.url.split(":")[2].split("/")[0]
    assert post_initialize(server.url, {"Host": "evil.example"})[0] == 403
    assert post_initialize(server.url, {"Host": f"evil.example:{port}"})[0] == 403
    assert post_initialize(server.url, {"Origin": "https://evil.example"})[0] == 403
    assert post_initialize(server.url, {"Origin": "http://localhost:3000"})[0] == 200
    assert post_initialize(server.url, {})[0] == 200


def test_sigterm_stops_gracefully(server):
    assert server.stop() == 0
    assert any("stopping: finishing requests in flight" in line for line in server.log), server.log


def threads_in_open(pid):
    """How many of the process's threads wait to open a FIFO for a writer."""
    waiting = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            waiting += (task / "wchan").read_text() == "wait_for_partner"
        except OSError:
            pass
    return waiting


def answered_or_not_let_in(url, body, headers):
    """POSTs `body` on a connection of its own and returns the status and
    the whole answer, or `None` and why when the server took none of it: the
    connection refused, or reset or closed before the first byte of a status
    line (a request left in the listener's backlog, or on a connection the
    stop closed before reading it). An answer cut once begun, or a timeout,
    raises."""
    try:
        response = urllib.request.urlopen(mcp_request(url, body, headers), timeout=30)
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except urllib.error.URLError as error:
        if isinstance(error.reason, ConnectionError):
            return None, repr(error.reason)
        raise
    except ConnectionError as error:
        # Raised by reading the status line: `RemoteDisconnected` is one.
        return None, repr(error)
    with response:
        return response.status, response.read().decode()


def test_sigterm_under_load_answers_every_request_in_flight_and_exits(serve, tmp_path):
    """Reads in flight on a session, through rmcp and beside it, two of
    them stuck in a plugin opening a FIFO nobody writes: SIGTERM lets each
    finish with its whole answer (the stuck ones with their time limit's
    error) before the sessions end, and the server exits by itself."""
    plugins = tmp_path / "plugins"
    (plugins / "data").mkdir(parents=True)
    os.mkfifo(plugins / "data" / "pipe")
    shutil.copy(ROOT / "target/test-plugins/liar.wasm", plugins / "liar.wasm")
    shutil.copy(PLUGINS / "notes.wasm", plugins / "notes.wasm")
    (plugins / "liar.toml").write_text('[[files]]\nhost = "data"\nguest = "/data"\n[limits]\ntimeout_ms = 2000\n')
    server = serve(plugins=plugins)
    _, headers, _ = post(server.url, INITIALIZE, {})
    session = {"Mcp-Session-Id": headers["mcp-session-id"], "MCP-Protocol-Version": "2025-11-25"}
    initialized = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode()
    assert post(server.url, initialized, session)[0] == 202

    def read(uri, request_id, through_rmcp):
        body = json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "resources/read", "params": {"uri": uri}})
        return answered_or_not_let_in(server.url, body.encode(), {**session, **(THROUGH_RMCP if through_rmcp else {})})

    with ThreadPoolExecutor(8) as pool:
        stuck = [pool.submit(read, "liar://open//data/pipe", index, index == 0) for index in range(2)]
        assert eventually(lambda: threads_in_open(server.process.pid) >= 2, 30, every=0.01), (
            "the stuck reads never reached the plugin"
        )
        reads = [pool.submit(read, "notes://notes/welcome", 10 + index, index % 2 == 0) for index in range(6)]
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(30) == 0
        answers = [future.result() for future in stuck + reads]
    for status, body in answers[:2]:
        assert status == 200 and "plugin liar exceeded its time limit of 2000 ms in read" in body, body
    for status, body in answers[2:]:
        # Sent as the stop began: answered whole, or not let in.
        assert status == 200 and "# Welcome" in body or status is None, (status, body)
    assert any("stopping: finishing requests in flight" in line for line in server.log), server.log
