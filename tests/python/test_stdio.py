"""The example plugins through resmux over stdio, seen by the official Python
SDK (`mcp` 2.x) in both eras: `auto` negotiates 2026-07-28 through
`server/discover`, `legacy` uses the 2025-11-25 `initialize` handshake."""

import asyncio
import base64
import os
from pathlib import Path

import pytest
from mcp import types
from mcp.client.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError

ROOT = Path(__file__).resolve().parents[2]
BINARY = Path(os.environ.get("RESMUX_BIN", ROOT / "target/release/resmux"))
PLUGINS = ROOT / "target/plugins"
SAMPLE = ROOT / "plugins/files/files-sample"
MODES = ["auto", "legacy"]


def run(mode, scenario, page_size=2):
    """Runs `scenario(client)` against a fresh `resmux serve` of the examples."""
    assert BINARY.exists() and PLUGINS.exists(), "run scripts/build first"
    server = StdioServerParameters(
        command=str(BINARY),
        args=["serve", "--plugins", str(PLUGINS), "--page-size", str(page_size)],
        env={"RESMUX_CACHE_DIR": str(ROOT / "target/test-cache"), "RUST_LOG": "warn"},
    )

    async def session():
        async with Client(server, mode=mode, cache=None) as client:
            return await scenario(client)

    return asyncio.run(asyncio.wait_for(session(), timeout=60))


def sample_uris():
    uris = set()
    for path in SAMPLE.rglob("*"):
        if path.is_file():
            uris.add("files://" + path.relative_to(SAMPLE).as_posix())
    return uris


@pytest.mark.parametrize("mode", MODES)
def test_negotiates_the_era_of_the_mode(mode):
    async def scenario(client):
        return client.session.protocol_version

    assert run(mode, scenario) == {"auto": "2026-07-28", "legacy": "2025-11-25"}[mode]


@pytest.mark.parametrize("mode", MODES)
def test_pages_through_every_resource_exactly_once(mode):
    async def scenario(client):
        uris, cursor, pages = [], None, 0
        while True:
            page = await client.list_resources(cursor=cursor)
            pages += 1
            assert len(page.resources) <= 2
            uris += [resource.uri for resource in page.resources]
            cursor = page.next_cursor
            if cursor is None:
                return uris, pages

    uris, pages = run(mode, scenario)
    expected = sample_uris()
    expected |= {f"notes://notes/{n}" for n in ["welcome", "paths", "errors", "pagination", "groceries"]}
    expected |= {"test://static-text", "test://static-binary", "test://watched-resource"}
    expected |= {"dataset://datasets/cities", "dataset://datasets/rivers"}
    expected |= {f"catalog://items/{i}" for i in ["apples", "bread", "tea"]}
    expected |= {f"kv://keys/{k}" for k in ["greeting", "motd", "owner", "release.channel", "release.version"]}
    expected |= {
        f"units://units/{u}"
        for u in "metre kilometre centimetre mile foot inch kilogram gram pound ounce "
        "second minute hour day kelvin celsius fahrenheit".split()
    }
    assert len(uris) == len(set(uris)), uris
    assert set(uris) == expected
    assert pages == (len(expected) + 1) // 2


@pytest.mark.parametrize("mode", MODES)
def test_lists_templates_of_every_plugin(mode):
    async def scenario(client):
        templates, cursor = [], None
        while True:
            page = await client.list_resource_templates(cursor=cursor)
            templates += [template.uri_template for template in page.resource_templates]
            cursor = page.next_cursor
            if cursor is None:
                return templates

    assert run(mode, scenario) == [
        "catalog://items/{id}",
        "dataset://datasets/{name}/rows/{row}",
        "dataset://datasets/{name}/where/{column}/{value}",
        "files://{+path}",
        "kv://keys/{key}",
        "notes://notes/{id}",
        "notes://tags/{tag}",
        "test://template/{id}/data",
        "units://convert/{value}/{from}/{to}",
    ]


@pytest.mark.parametrize("mode", MODES)
def test_reads_text_and_binary(mode):
    async def scenario(client):
        text = await client.read_resource("files://guides/operators.md")
        image = await client.read_resource("files://pixel.png")
        fixture = await client.read_resource("test://static-binary")
        return text.contents, image.contents, fixture.contents

    text, image, fixture = run(mode, scenario)
    assert text[0].uri == "files://guides/operators.md"
    assert text[0].mime_type == "text/markdown"
    assert text[0].text == (SAMPLE / "guides/operators.md").read_text()
    assert image[0].mime_type == "image/png"
    assert base64.b64decode(image[0].blob) == (SAMPLE / "pixel.png").read_bytes()
    assert base64.b64decode(fixture[0].blob).startswith(b"\x89PNG\r\n\x1a\n")


@pytest.mark.parametrize("mode", MODES)
def test_completes_arguments(mode):
    async def scenario(client):
        reference = types.ResourceTemplateReference(type="ref/resource", uri="files://{+path}")
        paths = await client.complete(reference, {"name": "path", "value": "guides/o"})
        tags = await client.complete(
            types.ResourceTemplateReference(type="ref/resource", uri="notes://tags/{tag}"),
            {"name": "tag", "value": ""},
        )
        return paths.completion, tags.completion

    paths, tags = run(mode, scenario)
    assert paths.values == ["guides/operators.md"]
    assert tags.values == ["contract", "guide", "home"]
    assert tags.total == 3


@pytest.mark.parametrize("mode", MODES)
def test_not_found_names_the_uri_with_the_code_of_the_era(mode):
    async def scenario(client):
        with pytest.raises(MCPError) as raised:
            await client.read_resource("notes://notes/missing")
        return raised.value

    error = run(mode, scenario)
    assert error.code == {"auto": -32602, "legacy": -32002}[mode]
    assert error.data == {"uri": "notes://notes/missing"}
