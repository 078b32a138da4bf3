"""Fixtures of the e2e suite: the local cluster (``make cluster-up``) and Pulumi projects.

A missing tool or cluster fails the suite (it never skips): ``make e2e`` builds and starts
everything first.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import KUBECONFIG, ROOT, TOOLS, Kube, Project
from tests.e2e.realnode import CONTAINERD, ctr
from tools.node_images import PAUSE_IMAGE
from tools.real_node_config import NODE_NAME

HERE = Path(__file__).resolve().parent


# What `make e2e` prints about the cluster when a test fails: enough to tell a pod that was never
# scheduled (and why) from one that never became Ready, or a node that stopped heartbeating.
CLUSTER_STORY = (
    ("nodes", ("get", "nodes", "-o", "wide")),
    (
        "node conditions and taints",
        (
            "get",
            "nodes",
            "-o",
            "custom-columns=NAME:.metadata.name,READY:.status.conditions[?(@.type=='Ready')].status,"
            "TAINTS:.spec.taints[*].key",
        ),
    ),
    ("pods", ("get", "pods", "-A", "-o", "wide")),
    ("claims", ("get", "pvc", "-A")),
    ("volumes", ("get", "pv")),
    ("statefulsets", ("get", "statefulsets", "-A", "-o", "wide")),
    ("autoscalers", ("get", "hpa", "-A")),
    ("events", ("get", "events", "-A", "--sort-by=.lastTimestamp")),
)
STORY_EVENT_LINES = 60
STORY_LOG_LINES = 30
"""The last lines of each workload container's log, and of its previous instance when it
restarted: why a trainer left or never answered its probes is in there."""
SYSTEM_NAMESPACES = frozenset({"kube-system", "kube-public", "kube-node-lease"})


def _kubectl(kube: Kube, *args: str) -> str:
    try:
        return kube.run(*args, check=False)
    except subprocess.TimeoutExpired:
        return "(kubectl timed out)"


def container_logs(kube: Kube) -> list[str]:
    """``kubectl logs`` of every container on the real node outside the system namespaces
    (``--previous`` too for a container that restarted); kwok's simulated pods have none."""
    try:
        pods = json.loads(kube.run("get", "pods", "-A", "-o", "json"))["items"]
    except (AssertionError, ValueError, subprocess.TimeoutExpired) as err:
        return [f"--- container logs ---\n(pods could not be listed: {err})"]
    parts = []
    for pod in pods:
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        if namespace in SYSTEM_NAMESPACES or pod["spec"].get("nodeName") != NODE_NAME:
            continue
        for status in pod.get("status", {}).get("containerStatuses") or []:
            tail = ("-n", namespace, name, "-c", status["name"], f"--tail={STORY_LOG_LINES}")
            runs = [("previous instance", ("--previous",))] if status.get("restartCount") else []
            runs.append(("current", ()))
            for which, extra in runs:
                out = _kubectl(kube, "logs", *tail, "--timestamps", *extra)
                title = f"log of {namespace}/{name} {status['name']} ({which})"
                parts.append(f"--- {title} ---\n{out.rstrip() or '(empty)'}")
    return parts


def missing_images(kube: Kube) -> list[str]:
    """Images that pods on the real node (and its sandboxes) need but its containerd no longer
    has. Nothing can be pulled here: such an image was removed (image garbage collection, or a
    cleanup), and the pod that needs it never runs."""
    if not CONTAINERD.exists():
        return []
    try:
        pods = json.loads(kube.run("get", "pods", "-A", "-o", "json"))["items"]
        present = set(ctr("images", "ls", "-q", timeout=60).split())
    except (AssertionError, ValueError, subprocess.TimeoutExpired):
        return []
    needed = {PAUSE_IMAGE: "every pod (sandbox image)"}
    for pod in pods:
        if pod["spec"].get("nodeName") != NODE_NAME:
            continue
        for container in pod["spec"].get("initContainers", []) + pod["spec"]["containers"]:
            needed.setdefault(container["image"], f"{pod['metadata']['namespace']}/"
                              f"{pod['metadata']['name']}")  # fmt: skip
    return [
        f"image {image} is gone from the node's containerd (needed by {who}); it cannot be "
        "pulled here: imported images must not be garbage-collected"
        for image, who in sorted(needed.items())
        if image not in present and _qualified(image) not in present
    ]


def _qualified(image: str) -> str:
    """containerd's name for a short reference (``busybox:1`` -> ``docker.io/library/...``)."""
    first = image.split("/", 1)[0]
    if "/" in image and ("." in first or ":" in first or first == "localhost"):
        return image
    return f"docker.io/{image}" if "/" in image else f"docker.io/library/{image}"


def cluster_story(kube: Kube) -> str:
    """The cluster's state, as ``kubectl get`` prints it, and the workload containers' logs, for
    a failed test's report."""
    parts = [f"--- {line}" for line in missing_images(kube)]
    for title, args in CLUSTER_STORY:
        out = _kubectl(kube, *args)
        if title == "events":
            out = "\n".join(out.splitlines()[-STORY_EVENT_LINES:])
        parts.append(f"--- {title} ---\n{out.rstrip() or '(none)'}")
    parts += container_logs(kube)
    return "\n".join(parts)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.failed and call.when in ("setup", "call") and KUBECONFIG.exists():
        report.sections.append(("cluster at the failure", cluster_story(Kube())))
    return report


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Everything under ``tests/e2e`` is marked ``e2e``: ``make test`` deselects it, ``make e2e``
    runs only it (the ``real_node`` tests on a cluster with a real node, the rest on kwok's)."""
    for item in items:
        if item.path.is_relative_to(HERE):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def kube() -> Kube:
    """The local cluster; fails when ``make cluster-up`` has not run."""
    for tool in ("pulumi", "pulumi-resource-kubernetes", "kubectl"):
        if not (TOOLS / "bin" / tool).exists():
            pytest.fail(f"{TOOLS / 'bin' / tool} missing: run `make tools` (or `make e2e`)")
    if not KUBECONFIG.exists():
        pytest.fail(f"{KUBECONFIG} missing: run `make cluster-up` (or `make e2e`)")
    client = Kube()
    assert client.run("get", "--raw", "/readyz").strip() == "ok"
    return client


@pytest.fixture(scope="session")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A local file backend (``pulumi login file://...``) for every stack of the session."""
    return tmp_path_factory.mktemp("pulumi-backend")


@pytest.fixture(scope="session")
def new_project(
    tmp_path_factory: pytest.TempPathFactory, backend: Path, kube: Kube
) -> Iterator[Callable[..., Project]]:
    """``new_project(stack, stack_file=None)``: a fresh stack in its own project directory.

    Every stack still holding resources at the end of the session is destroyed, so a failed
    test leaves nothing behind on the cluster.
    """
    made: list[Project] = []

    def make(stack: str, stack_file: str | None = None) -> Project:
        project = Project(
            tmp_path_factory.mktemp(f"project-{stack}"),
            stack,
            stack_file=stack_file,
            backend=backend,
        )
        made.append(project)
        return project

    yield make
    for project in made:
        try:
            project.stack.destroy(color="never")
            project.stack.workspace.remove_stack(project.stack.name)
        except Exception as exc:  # noqa: BLE001 - cleanup must try every stack
            print(f"cleanup of stack {project.stack.name}: {exc}", file=sys.stderr)


def rendered_resources(stack: str) -> list[dict]:
    """What ``tools.render`` registers for ``stack`` (type, name, inputs), in its own process:
    the renderer installs Pulumi's mocks, which must not touch this process's real runs."""
    code = (
        "import json, sys; from tools.render import render_stack; "
        f"r = render_stack({stack!r}); "
        "json.dump([{'type': x.type, 'name': x.name, 'inputs': x.inputs} "
        "for x in r.resources], sys.stdout)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)


@pytest.fixture(scope="session")
def real_node(kube: Kube) -> str:
    """The cluster's real node (its name); fails when the cluster runs kwok's nodes only (a
    real-node test that did not run is not a pass)."""
    node = kube.get("node", NODE_NAME)
    if node is None:
        pytest.fail(f"no real node {NODE_NAME}: `make cluster-up NODE=real` (make e2e starts one)")
    ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
    assert ready and ready[0]["status"] == "True", f"node {NODE_NAME} not Ready: {ready}"
    return NODE_NAME
