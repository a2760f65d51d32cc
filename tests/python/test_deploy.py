"""The deployment recipes in deploy/, checked offline: this machine runs no
containers and no cluster, so the Kubernetes manifests and the Dockerfile are
read and held to what they promise, and what they run (resmux with the
StatefulSet's arguments, its plugin manifests and its ceiling, the
plugins pulled from a real registry; haproxy with deploy/haproxy.cfg and the
environment its Deployment sets) is started here as processes."""

import asyncio
import re
import subprocess
import urllib.error
import urllib.request

import yaml
from mcp.client.client import Client

from conftest import BINARY, ROOT, all_resource_uris, eventually
from idp import free_port
from test_registry import registry, push, resmux  # noqa: F401 (a fixture)
from test_replicas import Haproxy, secret_file

DEPLOY = ROOT / "deploy"


def manifests(name):
    return {document["kind"]: document for document in yaml.safe_load_all((DEPLOY / "kubernetes" / name).read_text())}


def resmux_pod():
    return manifests("resmux.yaml")["StatefulSet"]["spec"]["template"]


def answers(url, within=60):
    """Whether `url` answers 200 within `within` seconds, as a probe that
    Kubernetes repeats would see it (readiness waits for the plugins)."""

    def ok():
        try:
            with urllib.request.urlopen(url, timeout=10) as answered:
                return answered.status == 200
        except urllib.error.HTTPError:
            return False

    return eventually(ok, within, every=0.1)


def test_kustomization_names_files_that_exist():
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    for resource in kustomization["resources"]:
        assert (DEPLOY / resource).is_file(), resource
    for generated in kustomization["configMapGenerator"]:
        for file in generated["files"]:
            assert (DEPLOY / file).is_file(), file


def test_the_replicas_are_locked_down_and_kept_available():
    resmux = manifests("resmux.yaml")
    pod = resmux["StatefulSet"]["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    assert resmux["StatefulSet"]["spec"]["replicas"] == 3
    assert resmux["StatefulSet"]["spec"]["serviceName"] == resmux["Service"]["metadata"]["name"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    # Secret files belong to root and the pod's fsGroup: resmux reads its
    # cursor secret through the group.
    (secret,) = [volume["secret"] for volume in pod["spec"]["volumes"] if "secret" in volume]
    assert secret["defaultMode"] & 0o040
    assert pod["spec"]["securityContext"]["fsGroup"] == pod["spec"]["securityContext"]["runAsGroup"]
    # Every connection comes from the balancer.
    assert "--max-connections-per-source=2048" in container["args"]
    assert set(container["resources"]) == {"requests", "limits"}
    budget = resmux["PodDisruptionBudget"]["spec"]
    assert budget["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert budget["minAvailable"] == 2
    ports = {port["name"] for port in container["ports"]}
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        assert container[probe]["httpGet"]["port"] in ports, probe


def test_the_image_runs_as_the_user_the_pod_requires_and_copies_what_exists():
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    uid = re.search(r"useradd .*--uid (\d+)", dockerfile).group(1)
    assert int(uid) == resmux_pod()["spec"]["securityContext"]["runAsUser"]
    names = re.search(r"for name in ([\w ]+); do", dockerfile).group(1).split()
    for name in names:
        assert f"-p resmux-plugin-{name}" in dockerfile, name
        assert (ROOT / "plugins" / name / f"{name}.toml").is_file(), name
    assert (ROOT / "plugins/files/files-sample").is_dir()


def test_the_replicas_and_haproxy_run_as_the_manifests_say(serve, registry, tmp_path):
    """resmux with the StatefulSet's arguments (its addresses on loopback,
    the secret, the plugin manifests and the ceiling in files here, the
    registry on loopback) behind haproxy with the Deployment's environment
    (the replicas' names on loopback): the signed plugin is pulled and
    verified, the probes answer where the manifest looks, and a listing
    walks across the three."""
    (container,) = resmux_pod()["spec"]["containers"]
    assert container["args"][0] == "serve"
    secret = secret_file(tmp_path, "cursor-secret", "a secret the three replicas of this test share\n")
    store = registry()
    done = resmux("key", str(tmp_path / "team"))
    assert done.returncode == 0, done.stderr
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    for manifest in (DEPLOY / "kubernetes/plugins").glob("*.toml"):
        text = manifest.read_text().replace("registry.example.com", store.host)
        (plugins / manifest.name).write_text(text)
        reference = re.search(r'^oci = "([^"]+)"', text, re.MULTILINE).group(1)
        push(ROOT / "target/plugins" / f"{manifest.stem}.wasm", reference, tmp_path / "team.key")
    ceiling = tmp_path / "ceiling.toml"
    ceiling.write_text(
        (DEPLOY / "kubernetes/ceiling.toml").read_text().replace("/etc/resmux/signers/team.pub", str(tmp_path / "team.pub"))
    )
    replicas = []
    for n in range(3):
        metrics = f"127.0.0.1:{free_port()}"
        here = {
            "--http": "127.0.0.1:0",
            "--metrics": metrics,
            "--cursor-secret-file": secret,
            "--ceiling": ceiling,
            "--cache-dir": tmp_path / f"cache-{n}",
            "--cache-key": tmp_path / f"cache-key-{n}",
        }
        args = []
        for arg in container["args"][1:]:
            flag = arg.split("=", 1)[0]
            value = here.get(flag)
            args.append(f"{flag}={value}" if value else arg)
        # The Server helper gives --http and --plugins itself.
        args = [arg for arg in args if not arg.startswith(("--http=", "--plugins="))]
        replica = serve(args=args, plugins=plugins)
        replica.metrics = metrics
        replicas.append(replica)
    for replica in replicas:
        for probe in ("livenessProbe", "readinessProbe"):
            assert answers(f"http://{replica.metrics}{container[probe]['httpGet']['path']}"), probe
    (haproxy,) = manifests("haproxy.yaml")["Deployment"]["spec"]["template"]["spec"]["containers"]
    environment = {variable["name"]: variable.get("value") for variable in haproxy["env"]}
    assert sorted(environment) == ["NAMESPACE", "RESMUX_LB_LISTEN", *[f"RESMUX_REPLICA_{n}" for n in (1, 2, 3)]]
    for n in (1, 2, 3):
        # In full: haproxy's own resolver applies no search domains.
        assert environment[f"RESMUX_REPLICA_{n}"] == f"resmux-{n - 1}.resmux.$(NAMESPACE).svc.cluster.local:8080"
    proxy = Haproxy([replica.url for replica in replicas])

    async def walk(url):
        async with Client(url, mode="auto", cache=None) as client:
            return await all_resource_uris(client)

    try:
        uris = asyncio.run(asyncio.wait_for(walk(proxy.url), 60))
    finally:
        proxy.stop()
    alone = asyncio.run(asyncio.wait_for(walk(replicas[0].url), 60))
    assert "notes://notes/welcome" in alone
    assert len(uris) == len(set(uris)) and set(uris) == set(alone)
    for replica in replicas:
        assert any("component pulled and verified" in line for line in replica.log), "".join(replica.log)


def test_every_flag_the_manifest_passes_is_one_resmux_serve_takes():
    (container,) = resmux_pod()["spec"]["containers"]
    help_text = subprocess.run([str(BINARY), "serve", "--help"], capture_output=True, text=True, check=True).stdout
    for arg in container["args"][1:]:
        assert re.search(rf"^\s+{arg.split('=', 1)[0]} ", help_text, re.MULTILINE), arg


def test_the_plugins_come_from_the_registry_signed_by_a_key_the_ceiling_lists():
    import tomllib

    pod = resmux_pod()["spec"]
    (container,) = pod["containers"]
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    generated = {config["name"]: config["files"] for config in kustomization["configMapGenerator"]}
    mounts = {mount["name"]: mount["mountPath"] for mount in container["volumeMounts"]}
    claims = {claim["metadata"]["name"] for claim in manifests("resmux.yaml")["StatefulSet"]["spec"]["volumeClaimTemplates"]}
    for volume in pod["volumes"]:
        assert volume["name"] in mounts
        if "configMap" in volume:
            assert volume["configMap"]["name"] in generated, volume
    assert set(mounts) == {volume["name"] for volume in pod["volumes"]} | claims
    args = dict(arg.split("=", 1) for arg in container["args"][1:] if "=" in arg)
    assert args["--plugins"] == mounts["plugins"]
    assert args["--ceiling"] == f"{mounts['ceiling']}/ceiling.toml"
    # Pulled components, and the key that vouches for them, go to the
    # replica's own volume, whose group is set once, not on every mount.
    assert args["--cache-dir"].startswith(mounts["pulled"] + "/")
    assert args["--cache-key"].startswith(mounts["pulled"] + "/")
    assert pod["securityContext"]["fsGroupChangePolicy"] == "OnRootMismatch"
    ceiling = tomllib.loads((DEPLOY / "kubernetes/ceiling.toml").read_text())
    for signer in ceiling["signatures"]["signers"]:
        assert signer.startswith(mounts["signers"] + "/")
        assert (DEPLOY / "kubernetes/signers" / signer.rsplit("/", 1)[1]).is_file()
    plugins = generated["resmux-plugins"]
    assert plugins
    for file in plugins:
        manifest = tomllib.loads((DEPLOY / file).read_text())
        assert "oci" in manifest and "signed_by" not in manifest, file
