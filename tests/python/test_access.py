"""Access control over HTTP: bearer tokens from a tokens file, each client
seeing only its schemes in listings, templates, reads, completion and
subscriptions alike; 401 with a challenge otherwise, on `/mcp` and any
path below it (no other path serves MCP); a rate limit on reads;
the tool bridge held to the same rules; and the audit log of every read."""

import asyncio
import hashlib
import shutil

import pytest
from mcp.shared.exceptions import MCPError

from conftest import ROOT, all_resource_uris, audit_lines, connect, post_initialize

ALICE = "alice-token-0123456789"
BOB = "bob-token-9876543210ab"


@pytest.fixture
def guarded(serve, tmp_path):
    tokens = tmp_path / "tokens.toml"
    bob_hash = hashlib.sha256(BOB.encode()).hexdigest()
    tokens.write_text(
        "[clients.alice]\n"
        'token = { from_env = "RESMUX_TEST_ALICE" }\n'
        'schemes = ["notes"]\n'
        "[clients.bob]\n"
        f'token_sha256 = "{bob_hash}"\n'
        'schemes = ["*"]\n'
        "reads_per_minute = 3\n"
    )
    audit = tmp_path / "audit.jsonl"
    server = serve(
        args=("--tokens", str(tokens), "--audit-log", str(audit)),
        env={"RESMUX_TEST_ALICE": ALICE},
    )
    server.audit = audit
    return server


def test_no_token_or_a_bad_one_gets_401_with_a_challenge(guarded):
    status, headers = post_initialize(guarded.url, {})
    assert status == 401
    assert headers["WWW-Authenticate"] == 'Bearer realm="resmux"'
    status, headers = post_initialize(guarded.url, {"Authorization": "Bearer not-a-known-token-at-all"})
    assert status == 401
    assert 'error="invalid_token"' in headers["WWW-Authenticate"]
    status, _ = post_initialize(guarded.url, {"Authorization": f"Bearer {ALICE}"})
    assert status == 200


def test_every_path_below_mcp_is_guarded_and_no_other_path_is_served(guarded):
    base = guarded.url.removesuffix("/mcp")
    for path in ("/mcp/", "/mcp/x", "/mcp//x", "/mcp?x=1"):
        status, headers = post_initialize(base + path, {})
        assert (status, headers["WWW-Authenticate"]) == (401, 'Bearer realm="resmux"'), path
        status, _ = post_initialize(base + path, {"Authorization": f"Bearer {ALICE}"})
        assert status == 200, path
    for path in ("/mcpx", "/MCP", "/mc%70", "/", "/healthzx"):
        status, headers = post_initialize(base + path, {"Authorization": f"Bearer {ALICE}"})
        assert status == 404, path
        assert "WWW-Authenticate" not in headers, path


@pytest.mark.parametrize("mode", ["auto", "legacy"])
@pytest.mark.filterwarnings("ignore:resources/subscribe is removed")
def test_a_client_sees_and_reaches_only_its_schemes(guarded, mode):
    async def scenario():
        async with connect(guarded, ALICE, mode) as client:
            uris = await all_resource_uris(client)
            templates = await client.list_resource_templates()
            note = await client.read_resource("notes://notes/welcome")
            refusals = {}
            with pytest.raises(MCPError) as read:
                await client.read_resource("test://static-text")
            refusals["read"] = read.value
            with pytest.raises(MCPError) as complete:
                await client.complete(
                    {"type": "ref/resource", "uri": "test://template/{id}/data"}, {"name": "id", "value": ""}
                )
            refusals["complete"] = complete.value
            if mode == "legacy":
                with pytest.raises(MCPError) as subscribe:
                    await client.subscribe_resource("test://watched-resource")
                refusals["subscribe"] = subscribe.value
            search = await client.call_tool("search_resources", {"query": "static"})
            tool_read = await client.call_tool("read_resource", {"uri": "test://static-text"})
            return uris, templates, note, refusals, search, tool_read

    uris, templates, note, refusals, search, tool_read = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert uris and all(uri.startswith("notes://") for uri in uris), uris
    assert all(t.uri_template.startswith("notes://") for t in templates.resource_templates)
    assert note.contents[0].text.startswith("# Welcome")
    not_found = {"auto": -32602, "legacy": -32002}[mode]
    assert refusals["read"].code == not_found
    assert str(refusals["read"]) == "resource test://static-text not found: it does not exist, or this client may not see it"
    assert refusals["complete"].code == -32602
    if mode == "legacy":
        assert refusals["subscribe"].code == -32002
    assert search.content[0].text == 'No resource matches "static".'
    assert tool_read.is_error
    assert tool_read.content[0].text == "resource test://static-text not found: it does not exist, or this client may not see it"


def test_reads_over_the_rate_limit_are_refused_and_everything_is_audited(guarded):
    async def scenario():
        async with connect(guarded, BOB, "auto") as client:
            for _ in range(3):
                await client.read_resource("test://static-text")
            with pytest.raises(MCPError) as limited:
                await client.read_resource("test://static-text")
            return limited.value

    limited = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert limited.code == -32029
    assert "client bob exceeded its rate limit of 3 reads per minute; retry in" in str(limited)

    async def alice_reads():
        async with connect(guarded, ALICE, "legacy") as client:
            await client.read_resource("notes://notes/welcome")
            with pytest.raises(MCPError):
                await client.read_resource("notes://notes/missing")
            await client.call_tool("read_resource", {"uri": "notes://notes/welcome"})

    asyncio.run(asyncio.wait_for(alice_reads(), 60))
    lines = audit_lines(guarded.audit, 7)
    summary = [(line["client"], line["via"], line["uri"], line["outcome"]) for line in lines]
    assert summary == [
        ("bob", "resources/read", "test://static-text", "ok"),
        ("bob", "resources/read", "test://static-text", "ok"),
        ("bob", "resources/read", "test://static-text", "ok"),
        ("bob", "resources/read", "test://static-text", "rate-limited"),
        ("alice", "resources/read", "notes://notes/welcome", "ok"),
        ("alice", "resources/read", "notes://notes/missing", "not-found"),
        ("alice", "tools/call", "notes://notes/welcome", "ok"),
    ]
    assert lines[0]["bytes"] == len("This is the content of the static text resource.")
    assert lines[3]["bytes"] == 0
    assert all(line["time"].endswith("Z") for line in lines)


def test_private_answers_are_cached_per_client_and_public_ones_shared(serve, tmp_path):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    shutil.copy(ROOT / "target/test-plugins/liar.wasm", plugins / "liar.wasm")
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(
        '[clients.carol]\ntoken = { from_env = "RESMUX_TEST_CAROL" }\nschemes = ["*"]\n'
        '[clients.dave]\ntoken = { from_env = "RESMUX_TEST_DAVE" }\nschemes = ["*"]\n'
    )
    server = serve(
        plugins=plugins,
        args=("--tokens", str(tokens)),
        env={"RESMUX_TEST_CAROL": ALICE, "RESMUX_TEST_DAVE": BOB},
    )

    async def reads(token, uri, times):
        async with connect(server, token, "auto") as client:
            return [(await client.read_resource(uri)).contents[0].text for _ in range(times)]

    def run(token, uri, times=1):
        return asyncio.run(asyncio.wait_for(reads(token, uri, times), 60))

    carol_private = run(ALICE, "liar://random/private", 2)
    assert carol_private[0] == carol_private[1], "a private answer was not cached for its client"
    assert run(BOB, "liar://random/private") != carol_private[:1], "a private answer reached another client"
    assert run(ALICE, "liar://random/public") == run(BOB, "liar://random/public")
