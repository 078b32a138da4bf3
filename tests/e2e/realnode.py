"""Helpers of the real-node tests: pods of the node's busybox image, commands in pods, the
node's containerd (``make cluster-up NODE=real``; ``tools/real_node.py``)."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.harness import KUBECONFIG, TOOLS, Kube, Project
from tools.node_images import BUSYBOX_IMAGE
from tools.real_node_config import NODE_NAME
from trainer import contract

STATE = TOOLS / "cluster"
CONTAINERD = STATE / "containerd" / "containerd.sock"
VOLUMES = STATE / "volumes"


def ctr(*args: str, stdin: bytes | None = None, timeout: float = 600) -> str:
    """``ctr`` against the node's containerd, in the kubelet's namespace."""
    result = subprocess.run(
        ["ctr", "--address", str(CONTAINERD), "-n", "k8s.io", *args],
        input=stdin,
        capture_output=True,
        timeout=timeout,
        check=False,
    )
    assert result.returncode == 0, f"ctr {' '.join(args)}: {result.stderr.decode()[-2000:]}"
    return result.stdout.decode()


def busybox_pod(
    name: str, namespace: str, command: str, labels: dict[str, str] | None = None
) -> dict:
    """A pod of the node's busybox image that Pod Security ``restricted`` admits."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {"app": name}},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "automountServiceAccountToken": False,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 10001,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": "main",
                    "image": BUSYBOX_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["sh", "-c", command],
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                    },
                    # A namespace with a ResourceQuota admits only pods that state both.
                    "resources": {
                        "requests": {"cpu": "10m", "memory": "16Mi"},
                        "limits": {"cpu": "100m", "memory": "32Mi"},
                    },
                }
            ],
        },
    }


def apply(kube: Kube, *docs: dict) -> None:
    kube.run(
        "apply",
        "-f",
        "-",
        stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(docs)}),
    )


def running(kube: Kube, name: str, namespace: str, timeout: float = 120) -> dict:
    """Wait until the pod runs on the real node; the pod."""

    def probe() -> dict | None:
        pod = kube.get("pod", name, namespace)
        if pod and pod["status"].get("phase") == "Running":
            return pod
        return None

    pod = kube.wait_for(f"pod {namespace}/{name} Running", probe, timeout)
    assert pod["spec"]["nodeName"] == NODE_NAME, pod["spec"].get("nodeName")
    return pod


def exec_in(
    kube: Kube, pod: str, namespace: str, command: str, timeout: float = 60
) -> tuple[int, str]:
    """``kubectl exec`` (API server -> kubelet -> containerd); exit status and output."""
    result = subprocess.run(
        [kube.kubectl, "--kubeconfig", str(kube.kubeconfig), "exec", "-n", namespace, pod, "--",
         "sh", "-c", command],
        capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip
    return result.returncode, result.stdout + result.stderr


def connect(kube: Kube, pod: str, namespace: str, host: str, port: int) -> tuple[int, str]:
    """A TCP connect from ``pod`` to ``host:port`` with a 3 s limit: exit status and output
    (busybox ``nc``: "timed out" when dropped, "Connection refused" when rejected)."""
    return exec_in(kube, pod, namespace, f"nc -w 3 {host} {port} </dev/null")


def namespace(name: str, restricted: bool = True) -> dict:
    labels = {"pod-security.kubernetes.io/enforce": "restricted"} if restricted else {}
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def volume_dir(kube: Kube, namespace: str, claim: str) -> Path:
    """The host directory of the local volume bound to ``claim``."""
    pvc = kube.get("persistentvolumeclaim", claim, namespace)
    assert pvc and pvc["status"].get("phase") == "Bound", pvc and pvc["status"]
    pv = kube.get("persistentvolume", pvc["spec"]["volumeName"])
    return Path(pv["spec"]["local"]["path"])


def running_tasks(namespace: str) -> list[str]:
    """IDs of the node's running containers that belong to pods of ``namespace``."""
    ids = ctr(
        "containers", "ls", "-q", f'labels."io.kubernetes.pod.namespace"=={namespace}'
    ).split()
    tasks = {}
    for line in ctr("tasks", "ls").splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 3:
            tasks[fields[0]] = fields[2]
    return [i for i in ids if tasks.get(i) == "RUNNING"]


def image_named_for(image_id: str) -> str | None:
    """A name under which the node's containerd holds the image whose config digest (Docker's
    image ID) is ``image_id``; ``None`` when it holds no such image."""
    for line in ctr("images", "ls").splitlines()[1:]:
        fields = line.split()
        if len(fields) < 3 or not fields[0].startswith("docker.io/"):
            continue
        manifest = json.loads(ctr("content", "get", fields[2]))
        if manifest.get("config", {}).get("digest") == image_id:
            return fields[0]
    return None


def load_image(image_id: str, reference: str) -> float | None:
    """The Docker image ``image_id`` in the node's containerd as ``reference`` (a tag): only
    tagged when containerd holds that build already (it keeps images between clusters), else
    ``docker save | ctr import``; the seconds the import took, ``None`` when it was held."""
    docker = subprocess.run(["docker", "tag", image_id, reference], capture_output=True,
                            text=True, timeout=120, check=False)  # fmt: skip
    assert docker.returncode == 0, docker.stderr
    full = f"docker.io/library/{reference}"
    held = image_named_for(image_id)
    if held is not None:
        if held != full:
            ctr("images", "tag", "--force", held, full)
        return None
    started = time.monotonic()
    save = subprocess.Popen(["docker", "save", reference], stdout=subprocess.PIPE)
    assert save.stdout is not None
    result = subprocess.run(
        ["ctr", "--address", str(CONTAINERD), "-n", "k8s.io", "images", "import", "-"],
        stdin=save.stdout, capture_output=True, timeout=1200, check=False,
    )  # fmt: skip
    assert save.wait() == 0 and result.returncode == 0, result.stderr.decode()[-2000:]
    return time.monotonic() - started


def container_pid(namespace: str, pod: str) -> int:
    """Host PID of the (one) running app container of ``pod`` (not its sandbox)."""
    found = []
    for cid in running_tasks(namespace):
        labels = json.loads(ctr("containers", "info", cid))["Labels"]
        if (
            labels.get("io.kubernetes.pod.name") == pod
            and labels.get("io.cri-containerd.kind") == "container"
        ):
            found.append(cid)
    assert len(found) == 1, f"running app containers of {namespace}/{pod}: {found}"
    for line in ctr("tasks", "ls").splitlines()[1:]:
        fields = line.split()
        if fields[0] == found[0]:
            return int(fields[1])
    raise AssertionError(f"no task for container {found[0]}")


def stack_settings(namespace: str, image: str) -> dict:
    """What every real-node stack sets beside the e2e stack file: its namespace and image, a
    claim deleted with it, two workers' worth of resources on a 2-core machine, a small batch,
    and the API server as pods reach it (the `kubernetes` Service, translated to the node)."""
    api = urlparse(json.loads(KUBECONFIG.read_text())["clusters"][0]["cluster"]["server"])
    return {
        "namespace": namespace,
        "imageReference": image,
        "checkpointRetention": "Delete",
        "cpuRequest": "250m",
        "cpuLimit": "1",
        "memoryRequest": "512Mi",
        "memoryLimit": "2Gi",
        "batchSize": 32,
        "apiServerCidrs": ["10.96.0.1/32", f"{api.hostname}/32"],
        "apiServerPorts": [443, api.port],
    }


def real_stack(
    new_project: Callable[..., Project],
    name: str,
    namespace: str,
    image: str,
    settings: Mapping[str, Any],
) -> Project:
    """A stack of the e2e stack file on the real node: the cluster's kubeconfig as a secret,
    :func:`stack_settings`, then ``settings``."""
    project = new_project(name, stack_file="e2e")
    project.set("kubeconfig", KUBECONFIG.read_text(), secret=True)
    project.set_many({**stack_settings(namespace, image), **settings})
    return project


def samples(text: str) -> dict[str, float]:
    """The Prometheus exposition ``text``, parsed: the first sample of each sample name (a
    counter's ``_total``, a histogram's ``_count``/``_sum``/``_bucket``), HELP and TYPE lines
    aside. A malformed exposition fails the test."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, sample.value)
    return out


def series_with_samples(text: str) -> set[str]:
    """Every series name of ``text`` that has at least one sample: sample names and, for a
    histogram or summary, the family's own name."""
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        if family.samples:
            names.add(family.name)
            names.update(s.name for s in family.samples)
    return names


def pod_metrics(kube: Kube, namespace: str, pod: str) -> dict[str, float]:
    """``/metrics`` of ``pod`` through the API server's proxy to the pod: the first sample of
    each series name (empty when the pod does not answer)."""
    text = kube.run(
        "get", "--raw",
        f"/api/v1/namespaces/{namespace}/pods/{pod}:{contract.DEFAULT_METRICS_PORT}/proxy/metrics",
        check=False,
    )  # fmt: skip
    try:
        return samples(text)
    except ValueError:  # an error page from the proxy while the pod does not answer
        return {}
