"""Reads over HTTP that resmux answers beside rmcp's HTTP service
(host/src/transport/http_reads.rs), sent raw as a client would send them: in
both eras a read comes back as one JSON body holding exactly what rmcp's own
answer holds, and every check rmcp makes still holds for a read: a foreign
`Host` or `Origin` is refused (403), headers that contradict the body (400,
-32020), `_meta` that misses a required key or names another revision (400),
an unknown or closed session (404)."""

import http.client
import json
import urllib.request
from urllib.parse import urlsplit

import pytest

from conftest import MODERN_META, THROUGH_RMCP, open_session, post

FOUND = "notes://notes/welcome"
MISSING = "notes://notes/missing"
MODERN = MODERN_META["io.modelcontextprotocol/protocolVersion"]


@pytest.fixture
def server(serve):
    # Without the response cache, so that two answers to one read are equal
    # (a cached answer's ttlMs counts down).
    return serve(args=("--response-cache-mib", "0"))


def read_body(uri, request_id=7, meta=MODERN_META):
    params = {"uri": uri}
    if meta is not None:
        params["_meta"] = meta
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "resources/read", "params": params}).encode()


def stateless_headers(uri):
    return {"Mcp-Method": "resources/read", "Mcp-Name": uri, "MCP-Protocol-Version": MODERN}


def message(response_headers, body):
    """The JSON-RPC answer of a response: its JSON body, or the one message
    of its event stream that answers a request."""
    if response_headers["Content-Type"].startswith("application/json"):
        return json.loads(body)
    assert response_headers["Content-Type"].startswith("text/event-stream"), response_headers
    answers = [
        json.loads(line[len("data:") :])
        for line in body.splitlines()
        if line.startswith("data:") and line[len("data:") :].strip()
    ]
    assert len(answers) == 1, body
    return answers[0]


@pytest.mark.parametrize("uri", [FOUND, MISSING])
def test_a_stateless_read_is_one_json_body_with_rmcps_answer(server, uri):
    headers = stateless_headers(uri)
    fast_status, fast_headers, fast_body = post(server.url, read_body(uri), headers)
    slow_status, slow_headers, slow_body = post(server.url, read_body(uri), {**headers, **THROUGH_RMCP})
    assert fast_headers["Content-Type"] == "application/json"
    assert slow_headers["Content-Type"].startswith("text/event-stream")
    assert fast_status == slow_status == 200
    answer = message(fast_headers, fast_body)
    assert answer == message(slow_headers, slow_body)
    if uri == FOUND:
        assert answer["result"]["contents"][0]["text"].startswith("# Welcome")
        assert answer["result"]["resultType"] == "complete"
    else:
        assert answer["error"]["code"] == -32602
        assert answer["error"]["data"] == {"uri": MISSING}


@pytest.mark.parametrize("uri", [FOUND, MISSING])
def test_a_session_read_is_one_json_body_with_rmcps_answer(server, uri):
    session = open_session(server.url)
    fast_status, fast_headers, fast_body = post(server.url, read_body(uri, meta=None), session)
    slow_status, slow_headers, slow_body = post(server.url, read_body(uri, meta=None), {**session, **THROUGH_RMCP})
    assert slow_headers["Content-Type"].startswith("text/event-stream")
    assert fast_headers["Content-Type"] == "application/json"
    assert fast_status == slow_status == 200
    answer = message(fast_headers, fast_body)
    assert answer == message(slow_headers, slow_body)
    if uri == FOUND:
        assert "resultType" not in answer["result"]
    else:
        assert answer["error"]["code"] == -32002


def test_a_read_from_a_foreign_host_or_origin_is_refused(server):
    port = server.url.split(":")[2].split("/")[0]
    for extra in (
        {"Host": "evil.example"},
        {"Host": f"evil.example:{port}"},
        {"Origin": "https://evil.example"},
    ):
        status, _, body = post(server.url, read_body(FOUND), {**stateless_headers(FOUND), **extra})
        assert status == 403, (extra, body)
        assert "Welcome" not in body
    status, headers, body = post(server.url, read_body(FOUND), {**stateless_headers(FOUND), "Host": f"LOCALHOST:{port}"})
    assert status == 200 and "Welcome" in body
    # Answered beside rmcp: hosts compare without case there too.
    assert headers["Content-Type"] == "application/json"


@pytest.mark.parametrize(
    "headers, text",
    [
        ({"Mcp-Name": "notes://notes/other"}, "Mcp-Name header `notes://notes/other` does not match"),
        ({"Mcp-Method": "resources/list"}, "Mcp-Method header `resources/list` does not match"),
        ({"MCP-Protocol-Version": "2025-11-25"}, "does not match request _meta protocolVersion"),
    ],
)
def test_a_stateless_read_whose_headers_contradict_it_is_refused(server, headers, text):
    status, response_headers, body = post(server.url, read_body(FOUND), {**stateless_headers(FOUND), **headers})
    assert status == 400, body
    answer = message(response_headers, body)
    assert answer["error"]["code"] == -32020
    assert text in answer["error"]["message"]
    assert "Welcome" not in body


def test_a_stateless_read_without_its_required_meta_is_refused(server):
    meta = {"io.modelcontextprotocol/protocolVersion": MODERN}
    status, response_headers, body = post(server.url, read_body(FOUND, meta=meta), stateless_headers(FOUND))
    assert status == 400, body
    answer = message(response_headers, body)
    assert answer["error"]["code"] == -32602
    assert "io.modelcontextprotocol/clientCapabilities" in answer["error"]["message"]


def test_a_read_on_an_unknown_or_closed_session_is_not_found(server):
    session = open_session(server.url)
    status, headers, body = post(server.url, read_body(FOUND, meta=None), session)
    assert status == 200 and headers["Content-Type"] == "application/json" and "Welcome" in body
    status, _, body = post(server.url, read_body(FOUND, meta=None), {**session, "Mcp-Session-Id": "no-such-session"})
    assert status == 404, body
    assert delete(server.url, session) == 202
    status, _, body = post(server.url, read_body(FOUND, meta=None), session)
    assert status == 404, body
    assert "Welcome" not in body


def delete(url, headers):
    """DELETEs the session `headers` name; returns the HTTP status."""
    request = urllib.request.Request(url, method="DELETE", headers=headers)
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.status


def post_raw(url, body, headers):
    """POSTs `body` with `headers`, a list of (name, value) pairs that may
    name one header twice; returns the HTTP status and the body."""
    address = urlsplit(url)
    connection = http.client.HTTPConnection(address.hostname, address.port, timeout=30)
    connection.putrequest("POST", address.path)
    for name, value in [
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        ("Content-Length", str(len(body))),
        *headers,
    ]:
        connection.putheader(name, value)
    connection.endheaders(body)
    response = connection.getresponse()
    answer = response.status, response.read().decode()
    connection.close()
    return answer


def test_a_session_read_with_a_version_header_in_doubt_gets_rmcps_answer(server):
    session = open_session(server.url)
    session_id = ("Mcp-Session-Id", session["Mcp-Session-Id"])
    # Named twice: rmcp goes by the first, a revision without sessions, and
    # refuses a read whose _meta does not name it.
    twice = [session_id, ("MCP-Protocol-Version", MODERN), ("MCP-Protocol-Version", MODERN)]
    status, body = post_raw(server.url, read_body(FOUND, meta=None), twice)
    assert status == 400, body
    assert "Welcome" not in body
    for doubtful in ["bogus", "2025-11-25\x85"]:
        status, body = post_raw(
            server.url, read_body(FOUND, meta=None), [session_id, ("MCP-Protocol-Version", doubtful)]
        )
        assert status == 400, (doubtful, body)
        assert "Welcome" not in body
