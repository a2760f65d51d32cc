"""The live namespace over HTTP: a 2026-07-28 client listening while the
operator adds and removes a plugin and while a granted file changes; a legacy
session subscribed over its GET stream; an `Mcp-Name` that does not match;
and a client that drops its stream mid-way."""

import asyncio
import itertools
import json
import shutil
import socket
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from mcp.client.client import Client
from mcp.client.subscriptions import ResourcesListChanged, ResourceUpdated

from conftest import MODERN_META, PLUGINS, all_resource_uris


def rewrite(path: Path, text: str):
    time.sleep(0.02)
    path.write_text(text)


def test_a_listener_hears_of_plugins_and_of_its_file(serve, live_folder):
    plugins, data = live_folder
    server = serve(plugins=plugins)

    async def scenario():
        async with Client(server.url, mode="auto", cache=None) as client:
            events = []
            async with client.listen(
                resources_list_changed=True, resource_subscriptions=["files://a.txt"]
            ) as subscription:
                assert subscription.honored.resources_list_changed
                assert subscription.honored.resource_subscriptions == ["files://a.txt"]
                shutil.copy(PLUGINS / "conformance.wasm", plugins / "extra.wasm")
                events.append(await anext(subscription))
                added = [uri for uri in await all_resource_uris(client) if uri.startswith("extra://")]
                rewrite(data / "a.txt", "second")
                events.append(await anext(subscription))
                (plugins / "extra.wasm").unlink()
                events.append(await anext(subscription))
            text = (await client.read_resource("files://a.txt")).contents[0].text
            return events, added, text

    events, added, text = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert isinstance(events[0], ResourcesListChanged)
    assert "extra://static-text" in added
    assert isinstance(events[1], ResourceUpdated) and events[1].uri == "files://a.txt"
    assert isinstance(events[2], ResourcesListChanged)
    assert text == "second"


@pytest.mark.filterwarnings("ignore:resources/subscribe is removed")
def test_a_legacy_session_hears_on_its_stream(serve, live_folder):
    plugins, data = live_folder
    server = serve(plugins=plugins)
    heard = asyncio.Queue()

    async def handler(message):
        if hasattr(message, "root"):
            message = message.root
        method = getattr(message, "method", None)
        if method:
            await heard.put((method, getattr(getattr(message, "params", None), "uri", None)))

    async def updated():
        while True:
            method, uri = await heard.get()
            if method == "notifications/resources/updated":
                return uri

    async def scenario():
        async with Client(server.url, mode="legacy", cache=None, message_handler=handler) as client:
            await client.subscribe_resource("files://a.txt")
            # The first change report after a subscribe only records where
            # the file stands, and a change made before it is part of that.
            # So the file changes, anew each second, until one is told.
            for attempt in itertools.count():
                rewrite(data / "a.txt", f"change {attempt}")
                try:
                    return await asyncio.wait_for(updated(), 1)
                except TimeoutError:
                    continue

    assert asyncio.run(asyncio.wait_for(scenario(), 60)) == "files://a.txt"


def raw_post(url, body, headers):
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json", "Accept": "application/json, text/event-stream", **headers},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_an_mcp_name_that_does_not_match_the_body_is_refused(server):
    read = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "resources/read",
        "params": {"uri": "notes://notes/welcome", "_meta": MODERN_META},
    }
    headers = {"Mcp-Method": "resources/read", "MCP-Protocol-Version": "2026-07-28"}
    status, body = raw_post(server.url, read, {**headers, "Mcp-Name": "notes://notes/paths"})
    assert status == 400
    assert '"code":-32020' in body.replace(" ", "")
    status, body = raw_post(server.url, read, {**headers, "Mcp-Name": "notes://notes/welcome"})
    assert status == 200 and "Welcome" in body


def test_a_client_that_drops_its_stream_leaves_the_server_serving(serve, live_folder):
    plugins, data = live_folder
    server = serve(plugins=plugins)
    host, port = server.url.split("//")[1].split("/")[0].split(":")
    listen = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 7,
            "method": "subscriptions/listen",
            "params": {
                "notifications": {"resourceSubscriptions": ["files://a.txt"]},
                "_meta": MODERN_META,
            },
        }
    )
    request = (
        f"POST /mcp HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        "Accept: application/json, text/event-stream\r\nMcp-Method: subscriptions/listen\r\n"
        f"MCP-Protocol-Version: 2026-07-28\r\nContent-Length: {len(listen)}\r\n\r\n{listen}"
    )
    for _ in range(3):
        with socket.create_connection((host, int(port)), timeout=30) as stream:
            stream.sendall(request.encode())
            received = b""
            while b"notifications/subscriptions/acknowledged" not in received:
                chunk = stream.recv(65536)
                assert chunk, received
                received += chunk
        rewrite(data / "a.txt", "changed while nobody reads the stream")

    async def still_serving():
        async with Client(server.url, mode="auto", cache=None) as client:
            return (await client.read_resource("files://a.txt")).contents[0].text

    assert asyncio.run(asyncio.wait_for(still_serving(), 60)) == "changed while nobody reads the stream"
    assert server.stop() == 0
    assert not any("panicked" in line for line in server.log), "".join(server.log)
