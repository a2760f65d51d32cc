"""Replicas of resmux behind a real load balancer (Debian's haproxy, started
here on loopback, sending each request to the next replica in turn): a
2026-07-28 client walks a listing whose pages come from three replicas that
share a cursor secret, and keeps walking while the secret is replaced one
replica at a time; a 2025-11-25 session stays on its replica, and its walk
goes on in a new session when that replica dies; a change in the folder the
replicas share is heard on the streams of each; a client's rate limit holds
for all replicas together through Debian's redis-server, and serving goes
on without it; an OAuth issuer's tokens (oidc-provider) and the Cedar access
policy decide alike on each replica."""

import asyncio
import contextlib
import hashlib
import os
import re
import shutil
import subprocess
import time
import urllib.request

import pytest

from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ResourcesListChanged, ResourceUpdated
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from conftest import BINARY, PLUGINS, ROOT, all_resource_uris, eventually, logged
from test_policy import POLICY
from idp import free_port, initialize

SECRET = "the cursor secret every replica of this test shares\n"
NEXT_SECRET = "a newer cursor secret, which replaces the first one\n"
CAROL = "carol-token-0123456789abcdef"


class Haproxy:
    """haproxy on a free loopback port with the repository's configuration
    (deploy/haproxy.cfg) in front of three replicas at `servers` (URLs of
    resmux's /mcp)."""

    def __init__(self, servers, port=None):
        assert len(servers) == 3, "deploy/haproxy.cfg names three replicas"
        port = port or free_port()
        replicas = {f"RESMUX_REPLICA_{n}": url.split("/")[2] for n, url in enumerate(servers, 1)}
        self.process = subprocess.Popen(
            ["haproxy", "-db", "-f", str(ROOT / "deploy/haproxy.cfg")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "RESMUX_LB_LISTEN": f"127.0.0.1:{port}", **replicas},
        )
        self.url = f"http://127.0.0.1:{port}/mcp"
        assert eventually(lambda: self.listening(port), 20, process=self.process), "haproxy listens within 20 s"

    @staticmethod
    def listening(port):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5)
            return True
        except OSError:
            return False

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)


@pytest.fixture
def balanced(serve):
    """Starts replicas with the extra arguments given for each (and the
    `serve` options given for all), and haproxy in front of them; stops
    haproxy at the end."""
    started = []

    def start(*replica_args, **options):
        replicas = []
        for args in replica_args:
            metrics = f"127.0.0.1:{free_port()}"
            replica = serve(args=[*args, "--metrics", metrics], **options)
            replica.metrics = metrics
            replicas.append(replica)
        proxy = Haproxy([replica.url for replica in replicas])
        started.append(proxy)
        return proxy, replicas

    yield start
    for proxy in started:
        proxy.stop()


def exposition(replica):
    """What `replica`'s metrics listener exposes."""
    with urllib.request.urlopen(f"http://{replica.metrics}/metrics", timeout=10) as response:
        return response.read().decode()


def pages_served(replica):
    """How many `resources/list` requests `replica` answered."""
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in exposition(replica).splitlines()
        if line.startswith("resmux_client_requests_total{") and 'mcp_method_name="resources/list"' in line
    )


def walk(url):
    """Every URI of the listing at `url`, walked by a 2026-07-28 client."""

    async def scenario():
        async with Client(url, mode="auto", cache=None) as client:
            assert client.session.protocol_version == "2026-07-28"
            return await all_resource_uris(client)

    return asyncio.run(asyncio.wait_for(scenario(), 60))


def refused_walk(url):
    """The error that ends a walk of the listing at `url`."""

    async def scenario():
        async with Client(url, mode="auto", cache=None) as client:
            try:
                await all_resource_uris(client)
            except MCPError as refused:
                return refused
        raise AssertionError("the walk ended without an error")

    return asyncio.run(asyncio.wait_for(scenario(), 60))


def secret_file(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    path.chmod(0o600)
    return str(path)


def test_a_listing_walked_across_replicas_is_whole_and_has_no_duplicates(serve, balanced, tmp_path):
    secret = ["--cursor-secret-file", secret_file(tmp_path, "cursor-secret", SECRET)]
    proxy, replicas = balanced(secret, secret, secret)
    alone = walk(serve().url)
    across = walk(proxy.url)
    assert across == alone
    assert len(across) == len(set(across)) == 40
    # 20 pages, each from the next replica: every one served a third.
    assert sorted(pages_served(replica) for replica in replicas) == [6, 7, 7]


def test_a_secret_replaced_in_three_rolling_steps_never_breaks_a_walk(balanced, tmp_path):
    def secrets(name, *lines):
        return ["--cursor-secret-file", secret_file(tmp_path, name, "".join(lines))]

    old = secrets("old", SECRET)
    new_known = secrets("new-known", SECRET, NEXT_SECRET)
    new_first = secrets("new-first", NEXT_SECRET, SECRET)
    new = secrets("new", NEXT_SECRET)
    # Each step is rolled out one replica at a time: while it is, replicas
    # of the step before and of the step serve together.
    for before, after in [(old, new_known), (new_known, new_first), (new_first, new)]:
        proxy, replicas = balanced(before, after, before)
        assert len(set(walk(proxy.url))) == 40
        assert sorted(pages_served(replica) for replica in replicas) == [6, 7, 7]
        proxy.stop()
        for replica in replicas:
            replica.stop()
    # Skipping the middle step breaks walks: the replica that seals with the
    # new secret hands out cursors the old one cannot open.
    proxy, _ = balanced(old, new_first, old)
    refused = refused_walk(proxy.url)
    assert "sealed with a secret this server does not hold" in refused.message


def test_replicas_without_a_shared_secret_refuse_each_others_cursors(balanced):
    proxy, replicas = balanced([], [], [])
    refused = refused_walk(proxy.url)
    assert "sealed with a secret this server does not hold" in refused.message
    assert "from a replica with another cursor secret" in refused.message
    assert sorted(pages_served(replica) for replica in replicas) == [0, 1, 1]


@pytest.mark.parametrize(
    "text, reason",
    [
        ("too short\n", "a cursor secret is 9 bytes long; give at least 32"),
        ("\n\n", "no cursor secret is given"),
    ],
)
def test_a_bad_cursor_secret_stops_the_start_with_the_reason(tmp_path, text, reason):
    path = secret_file(tmp_path, "bad-secret", text)
    started = subprocess.run(
        [str(BINARY), "serve", "--plugins", str(PLUGINS), "--http", "127.0.0.1:0", "--cursor-secret-file", path],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert started.returncode == 1
    assert f"resmux: cursor secret file {path}: {reason}" in started.stderr, started.stderr


def test_a_legacy_session_stays_on_its_replica_and_its_walk_outlives_the_replica(balanced, serve, tmp_path):
    secret = ["--cursor-secret-file", secret_file(tmp_path, "cursor-secret", SECRET)]
    proxy, replicas = balanced(secret, secret, secret)

    async def first_pages_then_the_replica_dies():
        seen, cursor = [], None
        async with Client(proxy.url, mode="legacy", cache=None) as client:
            for _ in range(5):
                page = await client.list_resources(cursor=cursor)
                seen += [resource.uri for resource in page.resources]
                cursor = page.next_cursor
            # Sticky: every page of the session came from one replica.
            served = [pages_served(replica) for replica in replicas]
            holder = replicas[served.index(5)]
            holder.process.kill()
            holder.process.wait(10)
            with pytest.raises(MCPError) as lost:
                await client.list_resources(cursor=cursor)
        return seen, cursor, served, lost.value, holder

    async def the_rest_in_a_new_session(cursor):
        async with Client(proxy.url, mode="legacy", cache=None) as client:
            rest = []
            while cursor is not None:
                page = await client.list_resources(cursor=cursor)
                rest += [resource.uri for resource in page.resources]
                cursor = page.next_cursor
            return rest

    seen, cursor, served, lost, holder = asyncio.run(asyncio.wait_for(first_pages_then_the_replica_dies(), 60))
    assert sorted(served) == [0, 0, 5]
    # Another replica does not know the session (404): the SDK says so, and
    # a client opens a new session, as the protocol asks.
    assert (lost.code, lost.message) == (-32600, "Session terminated")
    rest = asyncio.run(asyncio.wait_for(the_rest_in_a_new_session(cursor), 60))
    alone = walk(serve().url)
    assert seen + rest == alone
    assert len(set(seen + rest)) == 40
    survivors = [pages_served(replica) for replica in replicas if replica is not holder]
    assert sorted(survivors) == [0, 15], "the new session's pages, all from one replica"


def test_a_change_in_the_shared_folder_is_heard_on_the_streams_of_every_replica(serve, live_folder):
    plugins, data = live_folder
    replicas = [serve(plugins=plugins) for _ in range(3)]

    async def listen_on_each_then_change():
        async with contextlib.AsyncExitStack() as stack:
            clients = [
                await stack.enter_async_context(Client(replica.url, mode="auto", cache=None)) for replica in replicas
            ]
            streams = [
                await stack.enter_async_context(
                    client.listen(resources_list_changed=True, resource_subscriptions=["files://a.txt"])
                )
                for client in clients
            ]
            shutil.copy(PLUGINS / "conformance.wasm", plugins / "extra.wasm")
            added = [await anext(stream) for stream in streams]
            listed = [
                [uri for uri in await all_resource_uris(client) if uri.startswith("extra://")] for client in clients
            ]
            (data / "a.txt").write_text("second")
            updated = [await anext(stream) for stream in streams]
            return added, listed, updated

    added, listed, updated = asyncio.run(asyncio.wait_for(listen_on_each_then_change(), 60))
    assert all(isinstance(event, ResourcesListChanged) for event in added), added
    assert all("extra://static-text" in uris for uris in listed), listed
    assert [(type(event), event.uri) for event in updated] == [(ResourceUpdated, "files://a.txt")] * 3


class Redis:
    """Debian's redis-server on a free loopback port, keeping nothing on
    disk."""

    def __init__(self, port=None):
        self.port = port or free_port()
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        assert eventually(lambda: self.cli("PING") == "PONG", 20, process=self.process), "redis-server answers within 20 s"

    def cli(self, *command):
        answered = subprocess.run(
            ["redis-cli", "-p", str(self.port), *command], capture_output=True, text=True, timeout=10
        )
        return answered.stdout.strip()

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)


@pytest.fixture
def redis():
    started = []

    def start(port=None):
        store = Redis(port)
        started.append(store)
        return store

    yield start
    for store in started:
        store.stop()


def store_errors(replica):
    """How often the rate limit store did not answer `replica`."""
    found = re.search(r"^resmux_rate_limit_store_errors_total (\S+)$", exposition(replica), re.MULTILINE)
    return float(found.group(1))


def test_replicas_sharing_redis_hold_a_client_to_one_limit_and_serve_on_without_it(balanced, redis, tmp_path):
    store = redis()
    tokens = tmp_path / "tokens.toml"
    carol = hashlib.sha256(CAROL.encode()).hexdigest()
    tokens.write_text(f'[clients.carol]\ntoken_sha256 = "{carol}"\nschemes = ["notes"]\nreads_per_minute = 6\n')
    shared = ["--tokens", str(tokens), "--redis", f"redis://127.0.0.1:{store.port}/"]
    proxy, replicas = balanced(shared, shared, shared)

    async def read_until_refused(most):
        http = create_mcp_http_client(headers={"Authorization": f"Bearer {CAROL}"})
        async with Client(streamable_http_client(proxy.url, http_client=http), mode="auto", cache=None) as client:
            for taken in range(most):
                try:
                    await client.read_resource("notes://notes/welcome")
                except MCPError as refused:
                    return taken, refused
            return most, None

    # Six reads across three replicas: the seventh is refused, on whichever
    # replica it lands, with the limit named.
    taken, refused = asyncio.run(asyncio.wait_for(read_until_refused(20), 60))
    assert taken == 6, refused
    assert refused.code == -32029
    assert "client carol exceeded its rate limit of 6 reads per minute; retry in" in refused.message
    assert [store_errors(replica) for replica in replicas] == [0, 0, 0]

    # The store goes away: reads go on, each replica holding carol to the
    # whole limit on its own (they had counted nothing themselves), and
    # each says so once.
    store.stop()
    taken, refused = asyncio.run(asyncio.wait_for(read_until_refused(3), 60))
    assert (taken, refused) == (3, None)
    assert all(store_errors(replica) >= 1 for replica in replicas)
    for replica in replicas:
        assert logged(replica, "the rate limit store does not answer")

    # Back on the same address, the store is asked again and shared again.
    store = redis(store.port)
    deadline = time.monotonic() + 30
    while not all(any("shared by the replicas again" in line for line in replica.log) for replica in replicas):
        assert time.monotonic() < deadline, "every replica uses the store again within 30 s"
        asyncio.run(asyncio.wait_for(read_until_refused(3), 60))
        time.sleep(0.2)
    assert store.cli("EXISTS", "resmux:reads:carol") == "1"


def test_an_issuers_tokens_and_the_access_policy_decide_alike_on_every_replica(serve, tmp_path, provider_and_resource):
    """Clients reach the replicas at the balancer's address, the resource
    the issuer's tokens are for."""
    provider, resource = provider_and_resource
    policy = tmp_path / "access.cedar"
    policy.write_text(POLICY)
    auth = tmp_path / "auth.toml"
    auth.write_text(f'[oauth]\nissuer = "{provider.issuer}"\nresource = "{resource}"\nscopes = ["mcp:read"]\n')
    secret = secret_file(tmp_path, "cursor-secret", SECRET)
    args = ["--auth", str(auth), "--access-policy", str(policy), "--cursor-secret-file", secret]
    replicas = [serve(args=args) for _ in range(3)]
    proxy = Haproxy([replica.url for replica in replicas], port=int(resource.rsplit(":", 1)[1].split("/")[0]))
    try:

        async def listing(client):
            token = provider.token(client, "mcp:read", resource)
            http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
            async with Client(streamable_http_client(proxy.url, http_client=http), mode="auto", cache=None) as session:
                return await all_resource_uris(session)

        # Three pages, each from the next replica, each filtered alike.
        assert asyncio.run(asyncio.wait_for(listing("reader"), 60)) == [
            "files://guides/authors.md",
            "notes://notes/welcome",
            "notes://notes/paths",
            "notes://notes/errors",
            "notes://notes/pagination",
        ]
        assert asyncio.run(asyncio.wait_for(listing("auditor"), 60)) == []
        guest = provider.token("guest", "mcp:other", resource)
        for replica in replicas:
            status, headers, body = initialize(replica.url, guest)
            assert status == 403, body
            assert 'error="insufficient_scope"' in headers["WWW-Authenticate"]
    finally:
        proxy.stop()
