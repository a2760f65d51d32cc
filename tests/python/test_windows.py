"""resmux's Windows binary (`x86_64-pc-windows-gnu`, built by `scripts/test`
with MinGW-w64, in the `wine` profile) under Debian's wine64, driven
as a desktop MCP client drives it: started with pipes for its standard
handles, spoken to over stdio by the official Python SDK, and stopped by
closing stdin. The examples are served whole (every scheme listed, one read
of each, completions, `list_changed` when a plugin is copied in); `compile`,
`check` and `inspect` run on them; a file grant refuses what lies outside
it; lines may end in `\\r\\n`.

Each test starts its own resmux.exe in one wine prefix under target/, made
by the first test: `wineboot`, and a stand-in for bcryptprimitives.dll,
which Debian 12's wine 8.0 lacks and Rust's standard library calls
(tests/windows/bcryptprimitives.c). resmux keeps its compile cache where
Windows puts it, under the prefix's %LOCALAPPDATA%."""

import asyncio
import itertools
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from mcp import types
from mcp.client.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError

ROOT = Path(__file__).resolve().parents[2]
EXE = ROOT / "target/x86_64-pc-windows-gnu/wine/resmux.exe"
PLUGINS = ROOT / "target/plugins"
TEST_PLUGINS = ROOT / "target/test-plugins"
PREFIX = ROOT / "target/wine-prefix"
# Where Debian's wine64 package puts them (the `wine` launcher is only
# recommended).
WINE = "/usr/lib/wine/wine64"
WINESERVER = "/usr/lib/wine/wineserver64"
STAND_IN = ROOT / "tests/windows/bcryptprimitives.c"
SCHEMES = {"catalog", "dataset", "files", "kv", "notes", "test", "units"}
# The first start compiles every example under wine, Python's and
# JavaScript's (12 and 19 MB) among them.
PATIENCE = 240


def windows_path(path):
    """`path` as a Windows program under wine names it: on drive Z:."""
    return "Z:" + str(path).replace("/", "\\")


@pytest.fixture(scope="module")
def wine():
    """The environment that runs resmux.exe in the tests' wine prefix."""
    assert EXE.exists(), f"{EXE} is missing: scripts/build --with-tests builds it"
    env = {
        "WINEPREFIX": str(PREFIX),
        "WINEDEBUG": "-all",
        # No Mono or Gecko: resmux needs neither, and they would be fetched.
        "WINEDLLOVERRIDES": "mscoree,mshtml=",
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", "/root"),
        "RUST_LOG": "info",
    }
    system32 = PREFIX / "drive_c/windows/system32"
    if not system32.exists():
        subprocess.run([WINE, "wineboot", "--init"], env=env, check=True, timeout=PATIENCE)
        subprocess.run([WINESERVER, "--wait"], env=env, check=True, timeout=PATIENCE)
    stand_in = system32 / "bcryptprimitives.dll"
    if not stand_in.exists():
        subprocess.run(
            ["x86_64-w64-mingw32-gcc", "-O2", "-shared", "-s", "-o", stand_in, STAND_IN, "-ladvapi32"],
            check=True,
        )
    return env


def resmux(wine, *args):
    """Runs resmux.exe with `args` to its end: its exit code, stdout and stderr."""
    done = subprocess.run(
        [WINE, str(EXE), *map(str, args)], env=wine, capture_output=True, text=True, timeout=PATIENCE
    )
    return done.returncode, done.stdout, done.stderr


@pytest.fixture
def examples(tmp_path):
    """A copy of the example plugins, which a test may add to."""
    folder = tmp_path / "plugins"
    shutil.copytree(PLUGINS, folder)
    return folder


def test_a_desktop_client_lists_reads_and_completes_every_example_and_hears_a_new_one(wine, examples):
    heard = asyncio.Queue()

    async def handler(message):
        message = getattr(message, "root", message)
        if getattr(message, "method", None) == "notifications/resources/list_changed":
            await heard.put(message.method)

    async def listing(client):
        uris, cursor = [], None
        while True:
            page = await client.list_resources(cursor=cursor)
            uris += [resource.uri for resource in page.resources]
            if page.next_cursor is None:
                return uris
            cursor = page.next_cursor

    async def listing_with(client, schemes):
        """The listing once it holds every one of `schemes`, each new
        listing asked for when resmux says the last one changed."""
        while True:
            uris = await listing(client)
            if schemes <= {uri.split("://")[0] for uri in uris}:
                return uris
            await heard.get()

    server = StdioServerParameters(
        command=WINE, args=[str(EXE), "serve", "--plugins", windows_path(examples)], env=wine
    )

    async def session():
        async with Client(server, mode="legacy", cache=None, message_handler=handler) as client:
            uris = await listing_with(client, SCHEMES)
            first_of_each = {}
            for uri in uris:
                first_of_each.setdefault(uri.split("://")[0], uri)
            reads = {}
            for scheme, uri in sorted(first_of_each.items()):
                result = await client.read_resource(uri)
                reads[scheme] = [(content.uri, getattr(content, "text", None)) for content in result.contents]
            welcome = await client.read_resource("notes://notes/welcome")
            # kv's store is a single granted file, shown on Windows as a
            # copy: a change to the file shows in the next read.
            greeting = await client.read_resource("kv://keys/greeting")
            store = examples / "kv-sample/store.kv"
            store.write_text(store.read_text().replace("written in C", "written in C, changed"))
            changed = await client.read_resource("kv://keys/greeting")
            paths = await client.complete(
                types.ResourceTemplateReference(type="ref/resource", uri="files://{+path}"),
                {"name": "path", "value": "guides/o"},
            )
            tags = await client.complete(
                types.ResourceTemplateReference(type="ref/resource", uri="notes://tags/{tag}"),
                {"name": "tag", "value": ""},
            )
            while not heard.empty():
                heard.get_nowait()
            shutil.copy(examples / "notes.wasm", examples / "memo.wasm")
            after = await listing_with(client, {"memo"})
            greetings = [greeting.contents[0].text, changed.contents[0].text]
            return first_of_each, reads, welcome, greetings, paths.completion, tags.completion, after

    first_of_each, reads, welcome, greetings, paths, tags, after = asyncio.run(
        asyncio.wait_for(session(), PATIENCE)
    )
    assert set(first_of_each) == SCHEMES
    for scheme, contents in reads.items():
        assert contents and all(uri == first_of_each[scheme] for uri, _ in contents), (scheme, contents)
    assert welcome.contents[0].text.startswith("# Welcome"), welcome.contents[0].text
    assert greetings == ["Hello from a plugin written in C", "Hello from a plugin written in C, changed"]
    assert paths.values == ["guides/operators.md"]
    assert tags.values == ["contract", "guide", "home"]
    assert "memo://notes/welcome" in after


def test_compile_check_and_inspect_run_on_an_example(wine, examples):
    code, out, err = resmux(wine, "compile", windows_path(examples))
    assert code == 0, err
    code, out, err = resmux(wine, "check", windows_path(examples / "notes.wasm"))
    assert code == 0, out + err
    assert out.strip().endswith("17 passed, 0 warnings, 0 failed"), out
    assert 'ok    complete notes://tags/{tag} tag from "": 3 value(s) "contract", "guide", "home"' in out
    code, out, err = resmux(wine, "inspect", windows_path(examples / "files.wasm"))
    assert code == 0, err
    assert f"manifest   {windows_path(examples / 'files.toml')}" in out, out
    assert "wasi:filesystem/preopens@0.2.12               granted paths only" in out, out
    # `compile` above filled the cache where Windows keeps it, under the
    # prefix's %LOCALAPPDATA%.
    assert "compiled   Cached in " in out, out


def test_a_new_project_gets_a_powershell_build_that_names_this_resmux(wine, tmp_path):
    project = tmp_path / "hello"
    code, out, err = resmux(wine, "new", "--lang", "python", "--dir", windows_path(project), "hello")
    assert code == 0, err
    build = f"powershell -ExecutionPolicy Bypass -File {windows_path(project)}/build.ps1"
    assert out.startswith(f"wrote {windows_path(project)}: build it with {build}, "), out
    helpers = (project / "build-helpers.ps1").read_text()
    assert f"    $resmux = '{windows_path(EXE)}'\n" in helpers, helpers
    assert '\n. "$PSScriptRoot/build-helpers.ps1"\n' in (project / "build.ps1").read_text()


def test_a_file_grant_refuses_a_path_outside_it(wine, tmp_path):
    folder = tmp_path / "plugins"
    (folder / "data").mkdir(parents=True)
    (folder / "outside").mkdir()
    shutil.copy(TEST_PLUGINS / "liar.wasm", folder / "liar.wasm")
    (folder / "liar.toml").write_text('[[files]]\nhost = "data"\nguest = "/data"\n')
    (folder / "data/inside.txt").write_bytes(b"inside")
    (folder / "outside/secret.txt").write_bytes(b"secret")
    server = StdioServerParameters(command=WINE, args=[str(EXE), "serve", "--plugins", windows_path(folder)], env=wine)

    async def session():
        async with Client(server, mode="legacy", cache=None) as client:
            outcomes = {}
            for uri in [
                "liar://open//data/inside.txt",
                "liar://open//data/../outside/secret.txt",
                "liar://open//data/../../../../windows/win.ini",
                "liar://open/outside/secret.txt",
                "liar://write//data/new.txt",
            ]:
                result = await client.read_resource(uri)
                outcomes[uri] = result.contents[0].text
            return outcomes

    outcomes = asyncio.run(asyncio.wait_for(session(), PATIENCE))
    # WASI's errors, as the liar names their kinds: above the grant is not
    # permitted, a path beside it does not exist for the plugin, and a
    # read-only grant takes no write.
    assert outcomes == {
        "liar://open//data/inside.txt": "ok: 6 bytes",
        "liar://open//data/../outside/secret.txt": "error: PermissionDenied",
        "liar://open//data/../../../../windows/win.ini": "error: PermissionDenied",
        "liar://open/outside/secret.txt": "error: NotFound",
        "liar://write//data/new.txt": "error: PermissionDenied",
    }
    assert not (folder / "data/new.txt").exists()
    assert (folder / "outside/secret.txt").read_bytes() == b"secret"


@pytest.mark.filterwarnings("ignore:resources/subscribe is removed")
def test_a_subscriber_hears_of_a_change_in_a_granted_directory(wine, tmp_path):
    folder = tmp_path / "plugins"
    (folder / "data").mkdir(parents=True)
    shutil.copy(PLUGINS / "files.wasm", folder / "files.wasm")
    (folder / "files.toml").write_text(
        '[[files]]\nhost = "data"\nguest = "/data"\n\n[config]\nroot = "/data"\n'
    )
    (folder / "data/a.txt").write_text("first")
    server = StdioServerParameters(command=WINE, args=[str(EXE), "serve", "--plugins", windows_path(folder)], env=wine)
    heard = asyncio.Queue()

    async def handler(message):
        message = getattr(message, "root", message)
        if getattr(message, "method", None) == "notifications/resources/updated":
            await heard.put(message.params.uri)

    async def session():
        async with Client(server, mode="legacy", cache=None, message_handler=handler) as client:
            await client.subscribe_resource("files://a.txt")
            # The first change report after a subscribe only records where
            # the file stands, so the file changes anew each second until
            # one change is told.
            for attempt in itertools.count():
                (folder / "data/a.txt").write_text(f"change {attempt}")
                try:
                    uri = await asyncio.wait_for(heard.get(), 1)
                    break
                except TimeoutError:
                    continue
            text = (await client.read_resource("files://a.txt")).contents[0].text
            return uri, text

    uri, text = asyncio.run(asyncio.wait_for(session(), PATIENCE))
    assert uri == "files://a.txt"
    assert text.startswith("change ")


def test_a_listing_that_follows_its_files_sees_each_change_while_another_plugin_shares_the_folder(
    wine, tmp_path
):
    # files walks /data and keeps its listing until the grant watcher says
    # something there changed; liar is granted one file of the same folder,
    # which the backend watches as the same path, non-recursively. A change
    # two folders down (which no watch of /data alone reports) must still
    # reach files, before and after liar goes.
    folder = tmp_path / "plugins"
    (folder / "data/sub/deep").mkdir(parents=True)
    (folder / "data/sub/deep/a.txt").write_text("a")
    (folder / "data/x.txt").write_text("x")
    shutil.copy(PLUGINS / "files.wasm", folder / "files.wasm")
    (folder / "files.toml").write_text(
        '[[files]]\nhost = "data"\nguest = "/data"\n\n[config]\nroot = "/data"\n\n'
        "[changes]\nlisting_follows_files = true\n"
    )
    shutil.copy(TEST_PLUGINS / "liar.wasm", folder / "liar.wasm")
    (folder / "liar.toml").write_text('[[files]]\nhost = "data/x.txt"\nguest = "/x/x.txt"\n')
    server = StdioServerParameters(command=WINE, args=[str(EXE), "serve", "--plugins", windows_path(folder)], env=wine)

    async def files_listing(client):
        uris, cursor = [], None
        while True:
            page = await client.list_resources(cursor=cursor)
            uris += [resource.uri for resource in page.resources if resource.uri.startswith("files://")]
            if page.next_cursor is None:
                return uris
            cursor = page.next_cursor

    async def until_listed(client, uri):
        while uri not in await files_listing(client):
            await asyncio.sleep(0.2)

    async def liar_refuses(client):
        """Why a read of liar is refused; none while liar serves."""
        try:
            await client.read_resource("liar://honest")
            return None
        except MCPError as error:
            return error.error.message

    async def session():
        async with Client(server, mode="legacy", cache=None) as client:
            await until_listed(client, "files://sub/deep/a.txt")
            while await liar_refuses(client) is not None:
                await asyncio.sleep(0.2)
            (folder / "data/sub/deep/b.txt").write_text("b")
            await until_listed(client, "files://sub/deep/b.txt")
            (folder / "liar.wasm").unlink()
            while (gone := await liar_refuses(client)) is None:
                await asyncio.sleep(0.2)
            (folder / "data/sub/deep/c.txt").write_text("c")
            await until_listed(client, "files://sub/deep/c.txt")
            return gone, await files_listing(client)

    gone, listing = asyncio.run(asyncio.wait_for(session(), PATIENCE))
    assert gone == 'resource liar://honest not found: no plugin serves scheme "liar"', gone
    assert {"files://sub/deep/a.txt", "files://sub/deep/b.txt", "files://sub/deep/c.txt", "files://x.txt"} <= set(listing)


def test_lines_ending_in_crlf_are_answered_and_closing_stdin_stops_the_server(wine, tmp_path):
    folder = tmp_path / "plugins"
    folder.mkdir()
    for name in ["notes.wasm", "notes.toml"]:
        shutil.copy(PLUGINS / name, folder / name)
    code, _, err = resmux(wine, "compile", windows_path(folder))
    assert code == 0, err
    requests = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "desktop", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "resources/read", "params": {"uri": "notes://notes/welcome"}},
        {"jsonrpc": "2.0", "id": 3, "method": "ping"},
    ]
    server = subprocess.Popen(
        [WINE, str(EXE), "serve", "--plugins", windows_path(folder)],
        env=wine,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    # Every line ends in \r\n, as a Windows client may write them; then
    # stdin closes, as a client that is done closes it.
    out, err = server.communicate(b"".join(json.dumps(r).encode() + b"\r\n" for r in requests), timeout=PATIENCE)
    assert server.returncode == 0, err.decode()
    answers = {}
    for line in out.decode().splitlines():
        message = json.loads(line)
        assert message["jsonrpc"] == "2.0", line
        if "id" in message:
            answers[message["id"]] = message
    assert answers[1]["result"]["serverInfo"]["name"] == "resmux"
    assert answers[2]["result"]["contents"][0]["text"].startswith("# Welcome")
    assert answers[3]["result"] == {}
