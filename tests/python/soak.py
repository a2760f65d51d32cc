"""A soak of the real resmux binary: long runs of every kind of request over
stdio and over Streamable HTTP, sampling the server's memory, descriptors,
threads and gauges as they go, then a time of no traffic at all.

    target/python/bin/python tests/python/soak.py [--scale S] [--idle SECONDS] [--report FILE]

At scale 1 (the bench form; scripts/soak runs it):
- stdio: 200k reads (32 in flight), 20k listing pages, 5k subscribe and
  unsubscribe pairs, and 2k hot swaps of plugins in the live folder;
- HTTP: 200k reads on sessions of a tokens-file client, 20k listing pages,
  2k listen streams opened and dropped, and OAuth clients (a real OpenID
  provider, tests/node/idp.mjs) whose tokens expire and whose sessions are
  then left to end;
then SECONDS of idle (60 by default), over which the CPU the server used and
the files it opened are counted (strace). test_soak.py runs it at scale 0.1.

Every 10k requests it samples RSS, open descriptors, threads, and from the
server's /metrics: sessions, subscriptions, listen streams, idle instances,
response cache bytes and the number of metric series. The report is one
Markdown table per transport.
"""

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import http.client
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest import BINARY, PLUGINS, ROOT  # noqa: E402
from idp import NODE, Provider, free_port  # noqa: E402

SAMPLE_EVERY = 10_000
IN_FLIGHT = 32
READ_URI = "notes://notes/welcome"
SWAPPED = ["s1", "s2", "s3", "s4"]
GAUGES = {
    "sessions": "resmux_sessions",
    "subscriptions": "resmux_subscriptions",
    "listen streams": "resmux_listen_streams",
    "idle instances": "resmux_plugin_idle_instances",
    "cache bytes": "resmux_response_cache_bytes",
}
TICKS = os.sysconf("SC_CLK_TCK")
TOKEN = "soak-token-with-thirty-two-bytes-at-least"


@dataclass
class Plan:
    reads: int
    pages: int
    pairs: int
    swaps: int
    streams: int
    oauth_clients: int

    @staticmethod
    def at(scale):
        def part(count):
            return max(1, int(count * scale))

        return Plan(part(200_000), part(20_000), part(5_000), part(2_000), part(2_000), part(200))


@dataclass
class Curve:
    """Samples of one server process, one row every SAMPLE_EVERY requests."""

    transport: str
    pid: int
    metrics: str
    rows: list = field(default_factory=list)
    requests: int = 0
    next_sample: int = SAMPLE_EVERY

    def counted(self, requests):
        self.requests += requests
        if self.requests >= self.next_sample:
            self.sample()
            self.next_sample += SAMPLE_EVERY

    def sample(self):
        status = Path(f"/proc/{self.pid}/status").read_text()
        row = {
            "requests": self.requests,
            "RSS MiB": int(re.search(r"VmRSS:\s+(\d+)", status).group(1)) / 1024,
            "descriptors": len(os.listdir(f"/proc/{self.pid}/fd")),
            "threads": int(re.search(r"Threads:\s+(\d+)", status).group(1)),
        }
        series = exposed_series(self.metrics)
        for name, metric in GAUGES.items():
            row[name] = summed(series, metric)
        row["series"] = len(series)
        self.rows.append(row)

    def table(self):
        heads = list(self.rows[0])
        lines = [
            f"| {' | '.join(heads)} |",
            f"|{'|'.join('--:' for _ in heads)}|",
        ]
        for row in self.rows:
            cells = [f"{value:.1f}" if isinstance(value, float) else str(value) for value in row.values()]
            lines.append(f"| {' | '.join(cells)} |")
        return "\n".join(lines)


def plugin_folder(root):
    """notes and files, plus four copies of notes that the swaps replace."""
    folder = root / "plugins"
    folder.mkdir()
    for name in ["notes", "files"]:
        shutil.copy(PLUGINS / f"{name}.wasm", folder / f"{name}.wasm")
    shutil.copytree(PLUGINS / "files-sample", folder / "files-sample")
    shutil.copy(PLUGINS / "files.toml", folder / "files.toml")
    for name in SWAPPED:
        shutil.copy(PLUGINS / "notes.wasm", folder / f"{name}.wasm")
    return folder


def variants():
    """notes.wasm, and the same component with a custom section added: two
    files with different digests, each compiled once and then cached."""
    plain = (PLUGINS / "notes.wasm").read_bytes()
    name = b"soak"
    payload = bytes([len(name)]) + name + b"variant"
    return [plain, plain + bytes([0, len(payload)]) + payload]


# How to stop every process the soak started, called at its end whatever happened.
STARTED = []


class Process:
    """A resmux server process, its stderr drained into `log`."""

    def __init__(self, args, stdin):
        STARTED.append(self.kill)
        self.metrics_address = f"127.0.0.1:{free_port()}"
        self.process = subprocess.Popen(
            [str(BINARY), "serve", "--page-size", "2", "--metrics", self.metrics_address, *args],
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, "RESMUX_CACHE_DIR": str(ROOT / "target/test-cache"), "RUST_LOG": "info"},
        )
        self.log = []
        self.drainer = threading.Thread(target=self.drain, daemon=True)
        self.drainer.start()
        self.metrics = f"http://{self.metrics_address}/metrics"
        self.wait_for(lambda: self.answers(f"http://{self.metrics_address}/readyz"), "ready")

    def drain(self):
        for line in self.process.stderr:
            self.log.append(line.decode(errors="replace"))

    def answers(self, url):
        try:
            return urllib.request.urlopen(url, timeout=5).status == 200
        except OSError:
            return False

    def wait_for(self, condition, what, within=120):
        deadline = time.monotonic() + within
        while not condition():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"resmux never got {what}:\n{''.join(self.log[-40:])}")
            time.sleep(0.01)

    def logged(self, text):
        return sum(text in line for line in self.log)

    def cpu_ticks(self):
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])

    def stop(self):
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(30)

    def kill(self):
        if self.process.poll() is None:
            self.process.kill()


class Stdio:
    """A raw JSON-RPC client of a stdio server, many requests in flight."""

    def __init__(self, process):
        self.process = process.process
        self.next_id = 0
        self.notifications = 0
        result = self.call([("initialize", {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "soak", "version": "0"},
        })])[0]
        assert "result" in result, result
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, message):
        self.process.stdin.write(json.dumps(message).encode() + b"\n")

    def call(self, requests):
        """Sends `requests` (method, params) at once; their answers in order."""
        ids = []
        for method, params in requests:
            self.next_id += 1
            ids.append(self.next_id)
            message = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
            if params is not None:
                message["params"] = params
            self.send(message)
        self.process.stdin.flush()
        answers = {}
        while len(answers) < len(ids):
            line = self.process.stdout.readline()
            assert line, "the server closed stdout"
            message = json.loads(line)
            if "id" in message:
                answers[message["id"]] = message
            else:
                self.notifications += 1
        return [answers[request_id] for request_id in ids]


def ok(answers, what):
    for answer in answers:
        assert "result" in answer, f"{what}: {answer}"


def walk(call, pages):
    """Walks the resource listing for `pages` pages, starting over at its end."""
    cursor = None
    for _ in range(pages):
        answer = call("resources/list", {"cursor": cursor} if cursor else None)
        ok([answer], "a listing page")
        cursor = answer["result"].get("nextCursor")


def slices(plan):
    """The soak cut into slices of about a thousand reads, each with its
    share of every other kind of request, so that every 10k requests hold
    every kind."""
    count = max(1, plan.reads // 1000)
    return count, lambda total, index: total * (index + 1) // count - total * index // count


def soak_stdio(plan, root):
    folder = plugin_folder(root)
    process = Process(["--plugins", str(folder)], subprocess.PIPE)
    client = Stdio(process)
    curve = Curve("stdio", process.process.pid, process.metrics)
    curve.sample()
    count, share = slices(plan)
    files = variants()
    swapped = 0
    for index in range(count):
        reads = share(plan.reads, index)
        for start in range(0, reads, IN_FLIGHT):
            batch = min(IN_FLIGHT, reads - start)
            ok(client.call([("resources/read", {"uri": READ_URI})] * batch), "a read")
            curve.counted(batch)
        pages = share(plan.pages, index)
        walk(lambda method, params: client.call([(method, params)])[0], pages)
        curve.counted(pages)
        for _ in range(share(plan.pairs, index)):
            # One after the other: requests in flight together may be handled in any order.
            ok(client.call([("resources/subscribe", {"uri": READ_URI})]), "a subscription")
            ok(client.call([("resources/unsubscribe", {"uri": READ_URI})]), "an unsubscription")
            curve.counted(2)
        for _ in range(share(plan.swaps // len(SWAPPED), index)):
            before = process.logged("plugin replaced")
            content = files[(swapped // len(SWAPPED) + 1) % 2]
            for name in SWAPPED:
                aside = folder / f".{name}.wasm.part"
                aside.write_bytes(content)
                os.replace(aside, folder / f"{name}.wasm")
            process.wait_for(lambda: process.logged("plugin replaced") >= before + len(SWAPPED), "the swaps")
            swapped += len(SWAPPED)
            ok(client.call([("resources/read", {"uri": f"{SWAPPED[0]}://notes/welcome"})]), "a swapped read")
            curve.counted(1)
    curve.sample()
    return process, curve, swapped


class Http:
    """A raw Streamable HTTP client: one keep-alive connection, one session."""

    def __init__(self, url, token):
        self.url = urllib.parse.urlsplit(url)
        self.token = token
        self.connection = http.client.HTTPConnection(self.url.hostname, self.url.port, timeout=30)
        self.session = None
        self.next_id = 0
        status, headers, answer = self.post(
            "initialize",
            {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "soak", "version": "0"}},
        )
        assert status == 200, (status, answer)
        self.session = headers["mcp-session-id"]
        self.notify("notifications/initialized")

    def headers(self):
        headers = {
            "Authorization": f"Bearer {self.token}",
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2025-06-18",
        }
        if self.session:
            headers["Mcp-Session-Id"] = self.session
        return headers

    def exchange(self, body):
        self.connection.request("POST", self.url.path, body=json.dumps(body), headers=self.headers())
        response = self.connection.getresponse()
        text = response.read().decode()
        return response.status, {key.lower(): value for key, value in response.getheaders()}, text

    def post(self, method, params=None):
        self.next_id += 1
        body = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None:
            body["params"] = params
        status, headers, text = self.exchange(body)
        if headers.get("content-type", "").startswith("text/event-stream"):
            text = next(line[5:].strip() for line in text.splitlines() if line.startswith("data:") and line[5:].strip())
        try:
            return status, headers, json.loads(text) if text else None
        except json.JSONDecodeError:
            raise AssertionError(f"{method}: HTTP {status} {headers} {text!r}") from None

    def notify(self, method):
        status, _, _ = self.exchange({"jsonrpc": "2.0", "method": method})
        assert status == 202, status

    def call(self, method, params=None):
        status, _, answer = self.post(method, params)
        assert status == 200, (status, answer)
        return answer

    def listen_and_drop(self):
        """Opens the session's GET stream, waits for its headers, and drops it."""
        connection = http.client.HTTPConnection(self.url.hostname, self.url.port, timeout=30)
        headers = {key: value for key, value in self.headers().items() if key != "Content-Type"}
        headers["Accept"] = "text/event-stream"
        connection.request("GET", self.url.path, headers=headers)
        response = connection.getresponse()
        assert response.status == 200, response.status
        connection.close()

    def close(self):
        self.connection.request("DELETE", self.url.path, headers=self.headers())
        self.connection.getresponse().read()
        self.connection.close()


def soak_http(plan, root):
    folder = plugin_folder(root)
    tokens = root / "tokens.toml"
    tokens.write_text('[clients.soak]\ntoken = { from_env = "RESMUX_SOAK_TOKEN" }\nschemes = ["*"]\n')
    os.environ["RESMUX_SOAK_TOKEN"] = TOKEN
    port = free_port()
    resource = f"http://127.0.0.1:{port}/mcp"
    provider = Provider(resource, root)
    STARTED.append(provider.stop)
    auth = root / "auth.toml"
    auth.write_text(
        f'[oauth]\nissuer = "{provider.issuer}"\nresource = "{resource}"\nscopes = ["mcp:read"]\n'
    )
    process = Process(
        [
            "--plugins", str(folder), "--http", f"127.0.0.1:{port}", "--tokens", str(tokens),
            "--auth", str(auth), "--session-idle-seconds", "2",
        ],
        subprocess.DEVNULL,
    )
    curve = Curve("HTTP", process.process.pid, process.metrics)
    curve.sample()
    count, share = slices(plan)
    expired = 0
    client = Http(resource, TOKEN)
    for index in range(count):
        for _ in range(share(plan.reads, index)):
            ok([client.call("resources/read", {"uri": READ_URI})], "a read")
            curve.counted(1)
        pages = share(plan.pages, index)
        walk(client.call, pages)
        curve.counted(pages)
        for _ in range(share(plan.streams, index)):
            client.listen_and_drop()
            curve.counted(1)
        if index % 10 == 9:
            client.close()
            client = Http(resource, TOKEN)
        for _ in range(share(plan.oauth_clients, index)):
            now = int(time.time())
            token = provider.sign({
                "iss": provider.issuer, "aud": resource, "sub": f"user-{expired}", "client_id": "reader",
                "scope": "mcp:read", "iat": now, "exp": now + 2,
            })
            ok([Http(resource, token).call("resources/read", {"uri": READ_URI})], "an OAuth read")
            expired += 1
            curve.counted(3)
    client.close()
    # Every session left open ends once idle; none is left.
    process.wait_for(lambda: gauge(process.metrics, "resmux_sessions") == 0, "its sessions ended", 30)
    curve.sample()
    provider.stop()
    return process, curve, expired


def exposed_series(metrics):
    """The sample lines of the server's `/metrics` at `metrics`."""
    text = urllib.request.urlopen(metrics, timeout=10).read().decode()
    return [line for line in text.splitlines() if line and not line.startswith("#")]


def summed(series, name):
    """The sum of the samples of the metric `name`, over all its labels."""
    return sum(float(line.rsplit(" ", 1)[1]) for line in series if re.match(rf"{name}(\{{| )", line))


def gauge(metrics, name):
    return summed(exposed_series(metrics), name)


def idle(process, seconds):
    """With no traffic: the files the server opened over `seconds`, watched
    by strace, then the CPU it used over the next `seconds`, unwatched
    (strace stops every thread at each of its calls, which costs the
    server 30-50 ms of CPU in 10 s), in milliseconds."""
    trace = subprocess.run(
        ["timeout", str(seconds), "strace", "-f", "-qq", "-e", "trace=open,openat,openat2", "-p", str(process.process.pid)],
        capture_output=True,
        text=True,
    )
    opened = [line for line in trace.stderr.splitlines() if "open" in line]
    before = process.cpu_ticks()
    time.sleep(seconds)
    return (process.cpu_ticks() - before) * 1000 // TICKS, len(opened)


def run(scale, idle_seconds):
    assert BINARY.exists() and PLUGINS.exists() and NODE.exists(), "run scripts/build and npm ci in tests/node first"
    plan = Plan.at(scale)
    report = []
    try:
        with tempfile.TemporaryDirectory() as temporary:
            root = Path(temporary)
            (root / "stdio").mkdir()
            (root / "http").mkdir()
            stdio, stdio_curve, swapped = soak_stdio(plan, root / "stdio")
            stdio_idle = idle(stdio, idle_seconds)
            stdio.stop()
            http_process, http_curve, expired = soak_http(plan, root / "http")
            http_idle = idle(http_process, idle_seconds)
            http_process.stop()
    finally:
        while STARTED:
            STARTED.pop()()
    for curve, (cpu_ms, opened), extra in [
        (stdio_curve, stdio_idle, f"{swapped} hot swaps"),
        (http_curve, http_idle, f"{expired} OAuth clients whose tokens expired"),
    ]:
        report.append(
            {
                "transport": curve.transport,
                "rows": curve.rows,
                "table": curve.table(),
                "idle_cpu_ms": cpu_ms,
                "idle_files_opened": opened,
                "extra": extra,
            }
        )
    return plan, report, idle_seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--idle", type=int, default=60)
    parser.add_argument("--report", type=Path, default=ROOT / "target/soak.md")
    args = parser.parse_args()
    plan, report, idle_seconds = run(args.scale, args.idle)
    lines = [f"Soak at scale {args.scale}: {plan}", ""]
    for part in report:
        lines += [
            f"### {part['transport']} ({part['extra']})",
            "",
            part["table"],
            "",
            f"Then {idle_seconds} s idle: {part['idle_files_opened']} files opened; "
            f"the next {idle_seconds} s: {part['idle_cpu_ms']} ms of CPU.",
            "",
        ]
    args.report.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
