"""Replicas of resmux behind a real load balancer (Debian's haproxy, started
here on loopback, sending each request to the next replica in turn): a
2026-07-28 client walks a listing whose pages come from three replicas that
share a cursor secret, and keeps walking while the secret is replaced one
replica at a time."""

import asyncio
import subprocess
import time
import urllib.request

import pytest

from mcp.client.client import Client
from mcp.shared.exceptions import MCPError

from conftest import BINARY, PLUGINS, all_resource_uris
from idp import free_port

SECRET = "the cursor secret every replica of this test shares\n"
NEXT_SECRET = "a newer cursor secret, which replaces the first one\n"


class Haproxy:
    """haproxy on a free loopback port, round-robin over `servers` (URLs of
    resmux's /mcp), each request on its own: one replica, then the next."""

    def __init__(self, tmp_path, servers):
        port = free_port()
        backends = "\n".join(
            f"    server replica{n} {url.split('/')[2]}" for n, url in enumerate(servers)
        )
        config = tmp_path / "haproxy.cfg"
        config.write_text(
            f"""global
    maxconn 256
defaults
    mode http
    timeout connect 5s
    timeout client 60s
    timeout server 60s
    option http-server-close
frontend mcp
    bind 127.0.0.1:{port}
    default_backend replicas
backend replicas
    balance roundrobin
{backends}
"""
        )
        self.process = subprocess.Popen(
            ["haproxy", "-db", "-f", str(config)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.url = f"http://127.0.0.1:{port}/mcp"
        deadline = time.monotonic() + 20
        while not self.listening(port):
            assert self.process.poll() is None, self.process.stderr.read()
            assert time.monotonic() < deadline, "haproxy listens within 20 s"
            time.sleep(0.05)

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
def balanced(serve, tmp_path):
    """Starts replicas with the extra arguments given for each, and haproxy
    in front of them; stops haproxy at the end."""
    started = []

    def start(*replica_args):
        replicas = []
        for n, args in enumerate(replica_args):
            metrics = f"127.0.0.1:{free_port()}"
            replica = serve(args=[*args, "--metrics", metrics])
            replica.metrics = metrics
            replicas.append(replica)
        proxy = Haproxy(tmp_path, [replica.url for replica in replicas])
        started.append(proxy)
        return proxy, replicas

    yield start
    for proxy in started:
        proxy.stop()


def pages_served(replica):
    """How many `resources/list` requests `replica` answered."""
    with urllib.request.urlopen(f"http://{replica.metrics}/metrics", timeout=10) as response:
        exposition = response.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in exposition.splitlines()
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
        proxy, replicas = balanced(before, after)
        assert len(set(walk(proxy.url))) == 40
        assert [pages_served(replica) for replica in replicas] == [10, 10]
        proxy.stop()
        for replica in replicas:
            replica.stop()
    # Skipping the middle step breaks walks: the replica that seals with the
    # new secret hands out cursors the old one cannot open.
    proxy, _ = balanced(old, new_first)
    refused = refused_walk(proxy.url)
    assert "sealed with a secret this server does not hold" in refused.message


def test_replicas_without_a_shared_secret_refuse_each_others_cursors(balanced):
    proxy, replicas = balanced([], [])
    refused = refused_walk(proxy.url)
    assert "sealed with a secret this server does not hold" in refused.message
    assert "from a replica with another cursor secret" in refused.message
    assert [pages_served(replica) for replica in replicas] == [1, 1]


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
