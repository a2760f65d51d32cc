"""The deployment recipes in deploy/, checked offline: this machine runs no
containers and no cluster, so the Kubernetes manifests and the Dockerfile are
read and held to what they promise, and what they run (resmux with the
StatefulSet's arguments, haproxy with deploy/haproxy.cfg and the
environment its Deployment sets) is started here as processes."""

import asyncio
import re
import subprocess
import urllib.request

import yaml
from mcp.client.client import Client

from conftest import BINARY, ROOT, all_resource_uris
from idp import free_port
from test_replicas import Haproxy, secret_file

DEPLOY = ROOT / "deploy"


def manifests(name):
    return {document["kind"]: document for document in yaml.safe_load_all((DEPLOY / "kubernetes" / name).read_text())}


def resmux_pod():
    return manifests("resmux.yaml")["StatefulSet"]["spec"]["template"]


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


def test_the_replicas_and_haproxy_run_as_the_manifests_say(serve, tmp_path):
    """resmux with the StatefulSet's arguments (its addresses on loopback,
    the secret in a file here) behind haproxy with the Deployment's
    environment (the replicas' names on loopback): the probes answer where
    the manifest looks, and a listing walks across the three."""
    (container,) = resmux_pod()["spec"]["containers"]
    assert container["args"][0] == "serve"
    secret = secret_file(tmp_path, "cursor-secret", "a secret the three replicas of this test share\n")
    replicas = []
    for _ in range(3):
        metrics = f"127.0.0.1:{free_port()}"
        args = []
        for arg in container["args"][1:]:
            flag = arg.split("=", 1)[0]
            value = {"--http": "127.0.0.1:0", "--metrics": metrics, "--cursor-secret-file": secret}.get(flag)
            args.append(f"{flag}={value}" if value else arg)
        # The Server helper gives --http itself.
        args = [arg for arg in args if not arg.startswith("--http=")]
        replica = serve(args=args)
        replica.metrics = metrics
        replicas.append(replica)
    for replica in replicas:
        for probe in ("livenessProbe", "readinessProbe"):
            path = container[probe]["httpGet"]["path"]
            with urllib.request.urlopen(f"http://{replica.metrics}{path}", timeout=30) as answered:
                assert answered.status == 200, (probe, path)
    (haproxy,) = manifests("haproxy.yaml")["Deployment"]["spec"]["template"]["spec"]["containers"]
    environment = {variable["name"]: variable.get("value") for variable in haproxy["env"]}
    assert sorted(environment) == ["NAMESPACE", "RESMUX_LB_LISTEN", *[f"RESMUX_REPLICA_{n}" for n in (1, 2, 3)]]
    for n in (1, 2, 3):
        # In full: haproxy's own resolver applies no search domains.
        assert environment[f"RESMUX_REPLICA_{n}"] == f"resmux-{n - 1}.resmux.$(NAMESPACE).svc.cluster.local:8080"
    proxy = Haproxy([replica.url for replica in replicas])

    async def walk():
        async with Client(proxy.url, mode="auto", cache=None) as client:
            return await all_resource_uris(client)

    try:
        uris = asyncio.run(asyncio.wait_for(walk(), 60))
    finally:
        proxy.stop()
    assert len(uris) == len(set(uris)) == 40


def test_every_flag_the_manifest_passes_is_one_resmux_serve_takes():
    (container,) = resmux_pod()["spec"]["containers"]
    help_text = subprocess.run([str(BINARY), "serve", "--help"], capture_output=True, text=True, check=True).stdout
    for arg in container["args"][1:]:
        assert re.search(rf"^\s+{arg.split('=', 1)[0]} ", help_text, re.MULTILINE), arg
