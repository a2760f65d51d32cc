"""The log of `resmux serve --http`: at the default level no line is logged
per request (rmcp's lines of a session's start and end, which a stateless
request is, count as `debug`), and a filter that asks for rmcp's `debug`
brings them back."""

import json

import pytest

from conftest import MODERN_META, THROUGH_RMCP, post

REQUESTS = 100
READ = {
    "jsonrpc": "2.0",
    "method": "resources/read",
    "params": {
        "uri": "notes://notes/welcome",
        "_meta": MODERN_META,
    },
}
HEADERS = {
    "Mcp-Method": "resources/read",
    "Mcp-Name": "notes://notes/welcome",
    "MCP-Protocol-Version": "2026-07-28",
}



def lines_logged_by_stateless_reads(server, headers):
    """The lines `server` logs from before `REQUESTS` stateless reads with
    `headers` until it has stopped (its stop's own line included)."""
    before = len(server.log)
    for request_id in range(REQUESTS):
        status, _, body = post(server.url, json.dumps({**READ, "id": request_id}).encode(), headers)
        assert status == 200 and "Welcome" in body, body
    assert server.stop() == 0
    return server.log[before:]


@pytest.mark.parametrize("headers", [HEADERS, {**HEADERS, **THROUGH_RMCP}], ids=["beside rmcp", "through rmcp"])
def test_requests_are_not_logged_at_the_default_level(serve, headers):
    # The tests' servers log at `info`, the default of `serve`.
    lines = lines_logged_by_stateless_reads(serve(), headers)
    assert len(lines) < 5, "".join(lines)


def test_asking_for_rmcps_debug_logs_each_session(serve):
    lines = lines_logged_by_stateless_reads(serve(env={"RUST_LOG": "info,rmcp=debug"}), {**HEADERS, **THROUGH_RMCP})
    ended = [line for line in lines if "serve finished" in line]
    assert len(ended) >= REQUESTS, "".join(lines)
