"""resmux over Streamable HTTP (`serve --http`), seen by the official Python
SDK in both eras, plus the checks of the wire: `Host` and `Origin` against DNS
rebinding, and a graceful stop on SIGTERM."""

import asyncio

import pytest
from mcp.client.client import Client
from mcp.shared.exceptions import MCPError

from conftest import all_resource_uris, post_initialize


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
