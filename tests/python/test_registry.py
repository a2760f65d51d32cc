"""Signed plugins from a real OCI registry (Debian's docker-registry 2.8):
pushed and signed with `resmux push`, pulled and verified by `resmux serve`;
every refusal, each named in the log while the other plugins serve on;
serving from the cache with the registry stopped; and a tag moved in the
registry, picked up live by three replicas behind haproxy."""

import asyncio
import base64
import hashlib
import http.server
import json
import os
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import bcrypt
import pytest
from mcp.client.client import Client
from mcp.client.subscriptions import ResourcesListChanged
from mcp.shared.exceptions import MCPError

from conftest import BINARY, PLUGINS, all_resource_uris, eventually, logged
from idp import free_port
from test_replicas import balanced  # noqa: F401 (a fixture)

PASSWORD = "correct horse battery staple"
CONFIG_TYPE = "application/vnd.wasm.config.v0+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"


class Registry:
    """docker-registry on a free loopback port, storing under `root`."""

    def __init__(self, root: Path, port=None, users=None):
        self.port = port or free_port()
        self.host = f"127.0.0.1:{self.port}"
        self.storage = root / "storage"
        root.mkdir(parents=True, exist_ok=True)
        config = root / "registry.yml"
        auth = ""
        if users:
            htpasswd = root / "htpasswd"
            htpasswd.write_text(
                "".join(f"{user}:{bcrypt.hashpw(password.encode(), bcrypt.gensalt(4)).decode()}\n"
                        for user, password in users.items())
            )
            auth = f"auth:\n  htpasswd:\n    realm: resmux-test\n    path: {htpasswd}\n"
        config.write_text(
            "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n"
            f"    rootdirectory: {self.storage}\nhttp:\n  addr: {self.host}\n{auth}"
        )
        self.users = users
        self.process = subprocess.Popen(
            [shutil.which("docker-registry"), "serve", str(config)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert eventually(self.answers, 30, process=self.process), "the registry answers within 30 s"

    def answers(self):
        try:
            with urllib.request.urlopen(f"http://{self.host}/v2/", timeout=5) as response:
                return response.status == 200
        except urllib.error.HTTPError as refused:
            return refused.code == 401 and self.users
        except OSError:
            return False

    def stop(self):
        self.process.terminate()
        self.process.wait(30)

    def blob_file(self, digest):
        """Where the registry keeps the blob `digest`."""
        hex_digest = digest.split(":", 1)[1]
        return self.storage / "docker/registry/v2/blobs/sha256" / hex_digest[:2] / hex_digest / "data"

    def put_blob(self, repository, data: bytes):
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        start = urllib.request.Request(f"http://{self.host}/v2/{repository}/blobs/uploads/", method="POST")
        with urllib.request.urlopen(start, timeout=10) as response:
            location = response.headers["Location"]
        if location.startswith("/"):
            location = f"http://{self.host}{location}"
        separator = "&" if "?" in location else "?"
        upload = urllib.request.Request(
            f"{location}{separator}digest={digest}",
            data=data,
            method="PUT",
            headers={"Content-Type": "application/octet-stream"},
        )
        with urllib.request.urlopen(upload, timeout=10) as response:
            assert response.status == 201
        return digest

    def manifest(self, repository, reference):
        """The bytes of an OCI manifest the registry holds."""
        request = urllib.request.Request(
            f"http://{self.host}/v2/{repository}/manifests/{reference}", headers={"Accept": OCI_MANIFEST}
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.read()

    def put_manifest(self, repository, tag, manifest, media_type):
        body = json.dumps(manifest).encode()
        request = urllib.request.Request(
            f"http://{self.host}/v2/{repository}/manifests/{tag}",
            data=body,
            method="PUT",
            headers={"Content-Type": media_type},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 201
        return "sha256:" + hashlib.sha256(body).hexdigest()


@pytest.fixture
def registry(tmp_path):
    started = []

    def start(port=None, users=None):
        found = Registry(tmp_path / f"registry-{len(started)}", port, users)
        started.append(found)
        return found

    yield start
    for found in started:
        found.stop()


def resmux(*args, env=None):
    """Runs a one-shot resmux command; returns it finished."""
    return subprocess.run(
        [str(BINARY), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COSIGN_PASSWORD": PASSWORD, **(env or {})},
    )


def push(component, reference, key=None, env=None):
    """`resmux push`; returns the manifest digest it printed."""
    done = resmux("push", str(component), reference, *(["--key", str(key)] if key else []), env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout.split(" as ")[1].split(",")[0].strip()


@pytest.fixture
def keys(tmp_path):
    """Two cosign key pairs made by `resmux key`: the team's and someone else's."""
    folder = tmp_path / "keys"
    folder.mkdir()
    for name in ["team", "other"]:
        done = resmux("key", str(folder / name))
        assert done.returncode == 0, done.stderr
    assert (folder / "team.key").read_text().startswith("-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----")
    assert oct((folder / "team.key").stat().st_mode & 0o777) == "0o600"
    return folder


def folder_with_notes(tmp_path, name="plugins"):
    """A plugin folder holding the local notes plugin, which must serve on
    whatever happens to the remote ones."""
    plugins = tmp_path / name
    plugins.mkdir()
    shutil.copy(PLUGINS / "notes.wasm", plugins / "notes.wasm")
    return plugins


def remote(plugins, name, reference, keys, extra=""):
    (plugins / f"{name}.toml").write_text(
        f'oci = "{reference}"\nsigned_by = "{keys / "team.pub"}"\n{extra}'
    )


AIR_GAPPED = "[pull]\nrequire_log_entry = false\n"


async def read_text(client, uri):
    return (await client.read_resource(uri)).contents[0].text


def test_a_signed_component_goes_from_resmux_push_to_a_verified_read(serve, registry, keys, tmp_path):
    store = registry()
    digest = push(PLUGINS / "notes.wasm", f"{store.host}/team/notes:1.0", keys / "team.key")
    assert digest.startswith("sha256:")
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    remote(plugins, "team", f"{store.host}/team/notes:1.0", keys, AIR_GAPPED)
    cache = {"RESMUX_CACHE_DIR": str(tmp_path / "cache")}
    server = serve(plugins=plugins, env=cache)

    async def scenario():
        async with Client(server.url, mode="auto", cache=None) as client:
            # A read waits for its plugin to arrive; a listing does not.
            text = await read_text(client, "team://notes/welcome")
            return await all_resource_uris(client), text

    uris, text = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert "team://notes/welcome" in uris and text
    assert logged(server, "component pulled and verified")
    inspected = resmux("inspect", str(plugins / "team.toml"), env=cache)
    assert inspected.returncode == 0, inspected.stderr
    assert f"component  oci {store.host}/team/notes:1.0" in inspected.stdout
    assert f"pulled     {digest}" in inspected.stdout
    assert f"signed by  key {keys / 'team.pub'}, without a transparency-log entry" in inspected.stdout


def test_every_bad_artefact_is_refused_by_name_while_the_rest_serve(serve, registry, keys, tmp_path):
    store = registry()
    host = store.host
    push(PLUGINS / "notes.wasm", f"{host}/team/unsigned:1.0")
    push(PLUGINS / "notes.wasm", f"{host}/team/theirs:1.0", keys / "other.key")
    signed = push(PLUGINS / "notes.wasm", f"{host}/team/moved:1.0", keys / "team.key")
    other = push(PLUGINS / "conformance.wasm", f"{host}/team/moved:2.0", keys / "team.key")
    push(PLUGINS / "notes.wasm", f"{host}/team/big:1.0", keys / "team.key")
    push(PLUGINS / "notes.wasm", f"{host}/team/unlogged:1.0", keys / "team.key")
    # A manifest list, and an image that is not a component, each signed
    # with the team's key by pushing them as resmux would.
    member = push(PLUGINS / "notes.wasm", f"{host}/team/list:member", keys / "team.key")
    list_digest = store.put_manifest(
        "team/list", "1.0", {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [
            {"mediaType": OCI_MANIFEST, "digest": member, "size": len(store.manifest("team/list", member)),
             "platform": {"architecture": "wasm", "os": "wasip2"}}]}, OCI_INDEX)
    config = store.put_blob("team/image", b"{}")
    layer = store.put_blob("team/image", b"not a component")
    store.put_manifest("team/image", "1.0", {
        "schemaVersion": 2, "mediaType": OCI_MANIFEST,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config, "size": 2},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer, "size": 15}],
    }, OCI_MANIFEST)
    plugins = folder_with_notes(tmp_path)
    refusals = {
        "unsigned": (f"{host}/team/unsigned:1.0", AIR_GAPPED, "is not signed: no cosign signature"),
        "theirs": (f"{host}/team/theirs:1.0", AIR_GAPPED, f"is not signed by key {keys / 'team.pub'}"),
        "moved": (f"{host}/team/moved:1.0@{other}", AIR_GAPPED, f"tag 1.0 now names {signed}, not the pinned {other}"),
        "list": (f"{host}/team/list:1.0", AIR_GAPPED, "it is a manifest list"),
        "image": (f"{host}/team/image:1.0", AIR_GAPPED, "not a Wasm component artefact"),
        "big": (f"{host}/team/big:1.0", AIR_GAPPED + "max_component_mib = 0\n", "more than the 0 bytes [pull] max_component_mib allows"),
        "unlogged": (f"{host}/team/unlogged:1.0", "", "has no transparency-log entry"),
    }
    for name, (reference, extra, _) in refusals.items():
        remote(plugins, name, reference, keys, extra)
    assert list_digest
    server = serve(plugins=plugins, env={"RESMUX_CACHE_DIR": str(tmp_path / "cache")})
    for name, (reference, _, reason) in refusals.items():
        assert logged(server, f"oci {reference} refused"), (name, "".join(server.log))
        line = next(line for line in server.log if f"oci {reference} refused" in line)
        assert reason in line, (name, line)
        assert f"{name}.toml" in line, line

    async def scenario():
        async with Client(server.url, mode="auto", cache=None) as client:
            text = await read_text(client, "notes://notes/welcome")
            with pytest.raises(MCPError) as refused:
                await client.read_resource("unsigned://notes/welcome")
            return text, str(refused.value)

    text, refused = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert text
    assert "is not signed" in refused
    # Nothing of a refused component was downloaded.
    pulled = list((tmp_path / "cache/oci/components").iterdir())
    assert pulled == []


def test_a_registry_serving_other_bytes_for_a_pinned_digest_is_refused(serve, registry, keys, tmp_path):
    store = registry()
    digest = push(PLUGINS / "conformance.wasm", f"{store.host}/team/tampered:1.0", keys / "team.key")
    manifest = json.loads(store.manifest("team/tampered", digest))
    blob = store.blob_file(manifest["layers"][0]["digest"])
    original = blob.read_bytes()
    blob.write_bytes(original[:-1] + bytes([original[-1] ^ 0xFF]))
    plugins = folder_with_notes(tmp_path)
    remote(plugins, "tampered", f"{store.host}/team/tampered@{digest}", keys, AIR_GAPPED)
    server = serve(plugins=plugins, env={"RESMUX_CACHE_DIR": str(tmp_path / "cache")})
    tampered = blob.read_bytes()
    served = f"the registry served other bytes for {manifest['layers'][0]['digest']} " \
        f"(they hash to sha256:{hashlib.sha256(tampered).hexdigest()})"
    assert logged(server, served), "".join(server.log)
    assert list((tmp_path / "cache/oci/components").iterdir()) == []


class HostileRegistry:
    """A registry as an attacker who took it over would run it, on a free
    loopback port: `/team/endless` serves a manifest whose body never ends
    (no length declared), `/team/huge` one that declares 100 MB and then
    trickles; each is written for as long as the client reads."""

    def __init__(self):
        registry = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                if self.path == "/v2/":
                    self.send_response(200)
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Type", OCI_MANIFEST)
                if "/team/huge/" in self.path:
                    self.send_header("Content-Length", str(100 * 1000 * 1000))
                self.end_headers()
                try:
                    self.wfile.write(b'{"schemaVersion":2,"layers":[')
                    for _ in range(32 * 1024):
                        self.wfile.write(b"{}," * 21845)
                        registry.served += 65535
                        if "/team/huge/" in self.path:
                            time.sleep(0.1)
                except OSError:
                    pass

        self.served = 0
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.host = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()


def peak_kib(pid):
    """The most memory the process `pid` ever held, in KiB."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("VmHWM:")).split()[1])


def test_a_hostile_registrys_endless_or_huge_manifest_is_refused_within_its_bound(serve, keys, tmp_path):
    hostile = HostileRegistry()
    plugins = folder_with_notes(tmp_path)
    refused = {name: f"{hostile.host}/team/{name}:1.0" for name in ["endless", "huge"]}
    for name, reference in refused.items():
        remote(plugins, name, reference, keys, AIR_GAPPED)
    try:
        server = serve(plugins=plugins, env={"RESMUX_CACHE_DIR": str(tmp_path / "cache")})
        for name, reference in refused.items():
            assert logged(server, f"oci {reference} refused"), (name, "".join(server.log))
            line = next(line for line in server.log if f"oci {reference} refused" in line)
            assert f"the registry's manifest at http://{hostile.host}/v2/team/{name}/manifests/1.0 " \
                "is larger than 4 MiB, the most resmux reads" in line, line
            assert f"{name}.toml" in line, line
        # Read no further than the bound: what the endless one wrote before
        # the connection closed is the bound and what the socket buffers.
        peak = peak_kib(server.process.pid)
        assert peak < 512 * 1024, f"resmux peaked at {peak} KiB reading a hostile manifest"

        async def scenario():
            async with Client(server.url, mode="auto", cache=None) as client:
                return await read_text(client, "notes://notes/welcome")

        assert asyncio.run(asyncio.wait_for(scenario(), 60)).startswith("# Welcome")
    finally:
        hostile.stop()


def test_pulled_components_serve_from_the_cache_with_the_registry_down(serve, registry, keys, tmp_path):
    store = registry()
    push(PLUGINS / "notes.wasm", f"{store.host}/team/notes:1.0", keys / "team.key")
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    remote(plugins, "team", f"{store.host}/team/notes:1.0", keys, AIR_GAPPED)
    cache = {"RESMUX_CACHE_DIR": str(tmp_path / "cache")}
    pulled = resmux("pull", str(plugins), env=cache)
    assert pulled.returncode == 0, pulled.stderr
    assert f"(pulled {store.host}/team/notes:1.0@sha256:" in pulled.stdout
    store.stop()
    server = serve(plugins=plugins, env=cache)
    assert logged(server, "registry unreachable"), "".join(server.log)

    async def scenario():
        async with Client(server.url, mode="auto", cache=None) as client:
            return await read_text(client, "team://notes/welcome")

    assert asyncio.run(asyncio.wait_for(scenario(), 60))
    # A cache that never verified the component has nothing to serve.
    fresh = resmux("pull", str(plugins), env={"RESMUX_CACHE_DIR": str(tmp_path / "fresh")})
    assert fresh.returncode != 0
    assert "no copy verified here before is in the cache" in fresh.stderr
    # Nor does a cache whose record names a signer the manifest no longer takes.
    remote(plugins, "team", f"{store.host}/team/notes:1.0", keys, AIR_GAPPED)
    (plugins / "team.toml").write_text(
        (plugins / "team.toml").read_text().replace("team.pub", "other.pub")
    )
    other = resmux("pull", str(plugins), env=cache)
    assert other.returncode != 0
    assert "no copy verified here before is in the cache" in other.stderr


def test_a_moved_tag_is_verified_and_swapped_in_on_every_replica(balanced, registry, keys, tmp_path):
    store = registry()
    reference = f"{store.host}/team/app:live"
    push(PLUGINS / "notes.wasm", reference, keys / "team.key")
    plugins = folder_with_notes(tmp_path)
    remote(plugins, "app", reference, keys, AIR_GAPPED + "poll_interval_s = 1\n")
    # Each replica keeps its own cache, as each pod does.
    proxy, replicas = balanced(
        *[["--cache-dir", str(tmp_path / f"cache-{n}")] for n in range(3)], plugins=plugins
    )

    async def listing(url):
        async with Client(url, mode="auto", cache=None) as client:
            return [uri for uri in await all_resource_uris(client) if uri.startswith("app://")]

    for replica in replicas:
        assert "app://notes/welcome" in asyncio.run(asyncio.wait_for(listing(replica.url), 60))
    # An unsigned push to the tag is refused by all; the signed one serves on.
    push(PLUGINS / "conformance.wasm", reference)
    for replica in replicas:
        assert logged(replica, "plugin not replaced, the previous version keeps serving"), "".join(replica.log)
        assert "is not signed" in next(line for line in replica.log if "plugin not replaced" in line)
    async def swap():
        failures, reads = 0, 0
        async with Client(replicas[0].url, mode="auto", cache=None) as listener, Client(
            proxy.url, mode="auto", cache=None
        ) as reader:
            async with listener.listen(resources_list_changed=True) as subscription:
                push(PLUGINS / "conformance.wasm", reference, keys / "team.key")
                heard = await asyncio.wait_for(anext(subscription), 60)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    await read_text(reader, "notes://notes/welcome")
                    reads += 1
                except MCPError:
                    failures += 1
                if all(any("plugin replaced" in line for line in replica.log) for replica in replicas):
                    break
        return heard, failures, reads

    heard, failures, reads = asyncio.run(swap())
    assert isinstance(heard, ResourcesListChanged)
    assert failures == 0 and reads > 0
    for replica in replicas:
        uris = asyncio.run(asyncio.wait_for(listing(replica.url), 60))
        assert "app://static-text" in uris and "app://notes/welcome" not in uris



def test_the_ceiling_decides_who_may_sign_and_locked_mode_requires_it(serve, registry, keys, tmp_path):
    store = registry()
    reference = f"{store.host}/team/notes:1.0"
    push(PLUGINS / "notes.wasm", reference, keys / "team.key")
    ceiling = tmp_path / "ceiling.toml"
    ceiling.write_text('[signatures]\nsigners = ["keys/team.pub"]\n')
    plugins = folder_with_notes(tmp_path)
    (plugins / "listed.toml").write_text(f'oci = "{reference}"\n{AIR_GAPPED}')
    (plugins / "unlisted.toml").write_text(f'oci = "{reference}"\nsigned_by = "{keys / "other.pub"}"\n{AIR_GAPPED}')
    (plugins / "ownroot.toml").write_text(f'oci = "{reference}"\n{AIR_GAPPED}fulcio_roots = "mine.pem"\n')
    cache = {"RESMUX_CACHE_DIR": str(tmp_path / "cache")}
    server = serve(plugins=plugins, args=["--ceiling", str(ceiling)], env=cache)
    assert logged(server, f"which the ceiling's [signatures] does not list"), "".join(server.log)
    line = next(line for line in server.log if "does not list" in line)
    assert f"signed_by names key {keys / 'other.pub'}" in line and "unlisted.toml" in line
    assert logged(server, "the ceiling's [signatures] sets the trust root; remove fulcio_roots")

    async def scenario():
        async with Client(server.url, mode="auto", cache=None) as client:
            return await read_text(client, "listed://notes/welcome")

    assert asyncio.run(asyncio.wait_for(scenario(), 60))
    for name in ["unlisted", "ownroot"]:
        (plugins / f"{name}.toml").unlink()
    unlisted = resmux("pull", "--locked", str(plugins), env=cache)
    assert unlisted.returncode != 0
    assert "locked mode requires the ceiling's [signatures] to list who may sign" in unlisted.stderr
    locked = resmux("pull", "--locked", "--ceiling", str(ceiling), str(plugins / "listed.toml"), env=cache)
    assert locked.returncode == 0, locked.stderr
    assert f"signed by key {keys / 'team.pub'}" in locked.stdout


def test_registry_credentials_come_from_docker_config_or_the_environment_never_a_manifest(
    serve, registry, keys, tmp_path
):
    store = registry(users={"alice": "s3cret"})
    reference = f"{store.host}/team/notes:1.0"
    auths = json.dumps({"auths": {store.host: {"auth": base64.b64encode(b"alice:s3cret").decode()}}})
    docker = tmp_path / "docker"
    docker.mkdir()
    (docker / "config.json").write_text(auths)
    anonymous = resmux("push", str(PLUGINS / "notes.wasm"), reference)
    assert anonymous.returncode != 0, anonymous.stderr
    assert "the registry wants credentials resmux does not have" in anonymous.stderr, anonymous.stderr
    assert "RESMUX_REGISTRY_AUTH or Docker's config.json" in anonymous.stderr
    push(PLUGINS / "notes.wasm", reference, keys / "team.key", env={"DOCKER_CONFIG": str(docker)})
    plugins = folder_with_notes(tmp_path)
    remote(plugins, "team", reference, keys, AIR_GAPPED)
    without = serve(plugins=plugins, env={"RESMUX_CACHE_DIR": str(tmp_path / "without")})
    assert logged(without, f"oci {reference} refused: cannot read its manifest: the registry wants credentials"), (
        "".join(without.log)
    )
    server = serve(plugins=plugins, env={"RESMUX_CACHE_DIR": str(tmp_path / "with"), "RESMUX_REGISTRY_AUTH": auths})

    async def scenario():
        async with Client(server.url, mode="auto", cache=None) as client:
            return await read_text(client, "team://notes/welcome")

    assert asyncio.run(asyncio.wait_for(scenario(), 60))

# An operator's own sigstore deployment, as an air-gapped site runs one: a
# Fulcio CA that certifies signers' identities, and a Rekor log key that
# vouches for entries. Signatures are stored where cosign stores them.

from cryptography import x509  # noqa: E402
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID  # noqa: E402
import datetime  # noqa: E402

ISSUER = "https://idp.example.com"
SIGNATURE_LAYER = "application/vnd.dev.cosign.simplesigning.v1+json"


def pem_public(key):
    return key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode()


class Sigstore:
    def __init__(self, folder: Path):
        now = datetime.datetime.now(datetime.timezone.utc)
        self.ca_key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test fulcio")])
        self.ca = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self.ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
            )
            .sign(self.ca_key, hashes.SHA256())
        )
        self.rekor_key = ec.generate_private_key(ec.SECP256R1())
        self.fulcio_roots = folder / "fulcio.pem"
        self.fulcio_roots.write_bytes(self.ca.public_bytes(serialization.Encoding.PEM))
        self.rekor_keys = folder / "rekor.pub"
        self.rekor_keys.write_text(pem_public(self.rekor_key))

    def certificate(self, key, identity, issuer=ISSUER):
        """A short-lived certificate for `key`, naming `identity` and `issuer`."""
        now = datetime.datetime.now(datetime.timezone.utc)
        return (
            x509.CertificateBuilder()
            .subject_name(x509.Name([]))
            .issuer_name(self.ca.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(minutes=10))
            .add_extension(x509.SubjectAlternativeName([x509.RFC822Name(identity)]), critical=True)
            .add_extension(
                x509.KeyUsage(True, False, False, False, False, False, False, False, False), critical=True
            )
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING]), critical=False)
            .add_extension(
                x509.UnrecognizedExtension(x509.ObjectIdentifier("1.3.6.1.4.1.57264.1.1"), issuer.encode()),
                critical=False,
            )
            .sign(self.ca_key, hashes.SHA256())
            .public_bytes(serialization.Encoding.PEM)
            .decode()
        )

    def bundle(self, payload, signature, public_pem, logged_signature=None):
        """A Rekor bundle for `signature` over `payload` (or, given
        `logged_signature`, one that records that other signature)."""
        body = {
            "apiVersion": "0.0.1",
            "kind": "hashedrekord",
            "spec": {
                "data": {"hash": {"algorithm": "sha256", "value": hashlib.sha256(payload).hexdigest()}},
                "signature": {
                    "content": logged_signature or signature,
                    "publicKey": {"content": base64.b64encode(public_pem.encode()).decode()},
                },
            },
        }
        der = self.rekor_key.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        entry = {
            "body": base64.b64encode(json.dumps(body).encode()).decode(),
            "integratedTime": int(time.time()),
            "logIndex": 1,
            "logID": hashlib.sha256(der).hexdigest(),
        }
        canonical = json.dumps(entry, sort_keys=True, separators=(",", ":")).encode()
        stamp = self.rekor_key.sign(canonical, ec.ECDSA(hashes.SHA256()))
        return json.dumps({"SignedEntryTimestamp": base64.b64encode(stamp).decode(), "Payload": entry})


def sign(store, repository, digest, key, certificate=None, bundle=None):
    """Stores a cosign signature of `digest` made with `key`, with a
    certificate and a Rekor bundle (`bundle(payload, signature, public_pem)`)
    if given; returns nothing."""
    payload = json.dumps({
        "critical": {
            "identity": {"docker-reference": f"{store.host}/{repository}"},
            "image": {"docker-manifest-digest": digest},
            "type": "cosign container image signature",
        },
        "optional": None,
    }).encode()
    signature = base64.b64encode(key.sign(payload, ec.ECDSA(hashes.SHA256()))).decode()
    annotations = {"dev.cosignproject.cosign/signature": signature}
    if certificate:
        annotations["dev.sigstore.cosign/certificate"] = certificate
    if bundle:
        annotations["dev.sigstore.cosign/bundle"] = bundle(payload, signature, certificate or pem_public(key))
    layer = store.put_blob(repository, payload)
    config = store.put_blob(repository, b"{}")
    store.put_manifest(repository, digest.replace(":", "-") + ".sig", {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config, "size": 2},
        "layers": [{"mediaType": SIGNATURE_LAYER, "digest": layer, "size": len(payload), "annotations": annotations}],
    }, OCI_MANIFEST)


def test_keyless_signers_and_log_entries_are_checked_against_the_operators_trust_root(serve, registry, tmp_path):
    store = registry()
    host = store.host
    sigstore = Sigstore(tmp_path)
    trust = f'fulcio_roots = "{sigstore.fulcio_roots}"\nrekor_keys = "{sigstore.rekor_keys}"\n'
    keyed = ec.generate_private_key(ec.SECP256R1())
    (tmp_path / "keyed.pub").write_text(pem_public(keyed))
    cases = {}

    def case(name, signed_by, pull, reason=None, signing=None):
        digest = push(PLUGINS / "notes.wasm", f"{host}/team/{name}:1.0")
        signing(f"team/{name}", digest)
        cases[name] = (signed_by, pull, reason)

    release = ec.generate_private_key(ec.SECP256R1())
    release_cert = sigstore.certificate(release, "release@example.com")
    keyless = '{ identity = "release@example.com", issuer = "%s" }' % ISSUER
    by_release = lambda repository, digest: sign(  # noqa: E731
        store, repository, digest, release, release_cert, sigstore.bundle)
    case("keyless", keyless, trust, signing=by_release)
    case("someone", '{ identity = "someone@example.com", issuer = "%s" }' % ISSUER, trust,
         "one is signed by identity release@example.com (issuer https://idp.example.com)", by_release)
    case("otheridp", '{ identity = "release@example.com", issuer = "https://other.example.com" }', trust,
         "one is signed by identity release@example.com (issuer https://idp.example.com)", by_release)
    # A certificate that names the identity, over a signature its key did not make.
    stranger = ec.generate_private_key(ec.SECP256R1())
    case("borrowed", keyless, trust, "was not made with its certificate's key",
         lambda repository, digest: sign(store, repository, digest, stranger, release_cert, sigstore.bundle))
    keyed_signer = f'"{tmp_path / "keyed.pub"}"'
    case("logged", keyed_signer, trust, signing=lambda repository, digest: sign(
        store, repository, digest, keyed, bundle=sigstore.bundle))
    case("misfiled", keyed_signer, trust, "has a transparency-log entry for another signature",
         lambda repository, digest: sign(store, repository, digest, keyed, bundle=lambda p, s, k: sigstore.bundle(
             p, s, k, logged_signature=base64.b64encode(b"another").decode())))
    # A log entry vouched for by a log the operator does not know.
    (tmp_path / "elsewhere").mkdir()
    elsewhere = Sigstore(tmp_path / "elsewhere")
    case("forged", keyed_signer, trust, "has no signature that passes sigstore's own checks",
         lambda repository, digest: sign(store, repository, digest, keyed, bundle=elsewhere.bundle))
    case("unchecked", keyed_signer, "require_log_entry = false\n",
         "carries a transparency-log entry that cannot be checked: give rekor_keys",
         lambda repository, digest: sign(store, repository, digest, keyed, bundle=sigstore.bundle))
    plugins = folder_with_notes(tmp_path)
    for name, (signed_by, pull, _) in cases.items():
        (plugins / f"{name}.toml").write_text(
            f'oci = "{host}/team/{name}:1.0"\nsigned_by = {signed_by}\n[pull]\n{pull}'
        )
    cache = {"RESMUX_CACHE_DIR": str(tmp_path / "cache")}
    server = serve(plugins=plugins, env=cache)
    for name, (_, _, reason) in cases.items():
        if reason is None:
            continue
        assert logged(server, f"oci {host}/team/{name}:1.0 refused"), (name, "".join(server.log))
        line = next(line for line in server.log if f"oci {host}/team/{name}:1.0 refused" in line)
        assert reason in line, (name, line)

    async def scenario():
        async with Client(server.url, mode="auto", cache=None) as client:
            return [await read_text(client, f"{name}://notes/welcome") for name in ["keyless", "logged", "notes"]]

    assert all(asyncio.run(asyncio.wait_for(scenario(), 60)))
    inspected = resmux("inspect", str(plugins / "keyless.toml"), env=cache)
    assert inspected.returncode == 0, inspected.stderr
    assert (
        f"signed by  identity release@example.com (issuer {ISSUER}), with a checked transparency-log entry"
        in inspected.stdout
    )
