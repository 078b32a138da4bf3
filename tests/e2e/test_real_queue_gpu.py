"""Two teams, one GPU quota, on the real node (docs/queue.md): a ClusterQueue with a GPU flavor
of the node's stand-in devices (``tools/devplugin``) and room for one run's GPUs, two stacks in
two namespaces each asking for all of them. One run is admitted and the kubelet gives each of
its workers its own device; the other's workers wait behind Kueue's gate and ``tfd status``
says queued and why; when the first run stops (scale to zero) the second is admitted whole,
its ``tfd submit`` ends at training, and the kubelet gives its workers the freed devices.

The flavor is a platform team's GPU flavor: the pool's node label and taint (here the node's,
as ``test_real_gpu.py`` labels and taints it). The stand-in devices are no GPUs: the workers
train on the CPU with ``allowCpuFallback``. The tests run in file order (each needs the one
before).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from tests.e2e import realnode
from tests.e2e.harness import Kube, Project
from tests.e2e.test_image import built  # noqa: F401 - fixture
from tests.e2e.test_queue import (  # noqa: F401 - fixture
    condition,
    kueue,
    platform_objects,
    workload,
)
from tests.e2e.test_real_gpu import LABEL, TAINT, gpu_node  # noqa: F401 - fixture
from tests.e2e.test_real_queue import worker_names
from tests.e2e.test_real_tfd import Background
from tests.e2e.test_real_training import log_figure, node_image  # noqa: F401 - fixture
from tests.e2e.test_tfd import project_with_program, status, tfd
from tools.kueue import Kueue
from tools.real_node_config import GPU_RESOURCE, STAND_IN_GPUS

pytestmark = [pytest.mark.real_node, pytest.mark.timeout(1200)]
NAMESPACES = ("tfd-gpu-team-a", "tfd-gpu-team-b")
QUEUE, CLUSTER_QUEUE, FLAVOR = "team", "tfd-gpus", "stand-in-gpu"
WORKERS = STAND_IN_GPUS
"""Each run asks for every device of the node: one run's worth of the ClusterQueue."""
DEVICES = {f"stand-in-gpu-{i}" for i in range(STAND_IN_GPUS)}
_label_key, _label_value = LABEL.split("=")
_taint_key, _rest = TAINT.split("=")
_taint_value, _taint_effect = _rest.split(":")
PLATFORM = {
    "apiVersion": "v1",
    "kind": "List",
    "items": [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
         "metadata": {"name": FLAVOR},
         "spec": {"nodeLabels": {_label_key: _label_value},
                  "nodeTaints": [{"key": _taint_key, "value": _taint_value,
                                  "effect": _taint_effect}]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
         "metadata": {"name": CLUSTER_QUEUE},
         "spec": {"namespaceSelector": {}, "resourceGroups": [{
             "coveredResources": ["cpu", "memory", GPU_RESOURCE],
             # CPU and memory for both runs (realnode.stack_settings: 250m, 512Mi a worker):
             # only the GPUs make the second run wait.
             "flavors": [{"name": FLAVOR, "resources": [
                 {"name": "cpu", "nominalQuota": "2"},
                 {"name": "memory", "nominalQuota": "4Gi"},
                 {"name": GPU_RESOURCE, "nominalQuota": STAND_IN_GPUS},
             ]}],
         }]}},
    ],
}  # fmt: skip
WAITING: dict[str, Background] = {}
"""Team b's ``tfd submit``, from the test that starts it to the one that sees it admitted."""


@pytest.fixture(scope="module")
def platform(kueue: Kueue, kube: Kube, gpu_node: str) -> Iterator[None]:  # noqa: F811
    yield from platform_objects(kube, PLATFORM, CLUSTER_QUEUE)


@pytest.fixture(scope="module")
def teams(
    new_project: Callable[..., Project],
    node_image: str,  # noqa: F811 - the fixture
    platform: None,
) -> Iterator[list[Project]]:
    settings = {
        "replicas": WORKERS, "autoscalingEnabled": False, "gpusPerWorker": 1,
        "gpuNodeSelector": [LABEL], "gpuTolerations": [TAINT], "allowCpuFallback": True,
        "queueName": QUEUE, "queueClusterQueue": CLUSTER_QUEUE,
        "epochs": 400, "stepsPerEpoch": 100, "checkpointEvery": 50,
    }  # fmt: skip
    stacks = [
        realnode.real_stack(new_project, f"gputeam{team}", namespace, node_image, settings)
        for team, namespace in zip("ab", NAMESPACES, strict=True)
    ]
    yield [project_with_program(stack) for stack in stacks]
    for stack in stacks:  # while Kueue still runs: its finalizers need it
        try:
            stack.destroy()
        except Exception as exc:  # noqa: BLE001 - the session's cleanup tries again
            print(f"destroy of {stack.stack.name}: {exc}")


def devices_of(kube: Kube, namespace: str) -> dict[str, str]:
    """Each running worker's ``NVIDIA_VISIBLE_DEVICES``: what the kubelet allocated to it."""
    out = {}
    for pod in worker_names(kube, namespace):
        code, env = realnode.exec_in(kube, pod, namespace, "printenv NVIDIA_VISIBLE_DEVICES")
        assert code == 0, f"{namespace}/{pod}: {env}"
        out[pod] = env.strip()
    return out


def assigned_flavor(kube: Kube, namespace: str) -> str | None:
    wl = workload(kube, namespace)
    assignments = (wl.get("status", {}).get("admission") or {}).get("podSetAssignments") or [{}]
    return (assignments[0].get("flavors") or {}).get(GPU_RESOURCE)


def test_one_team_trains_on_every_device_and_the_other_waits_queued(
    teams: list[Project], kube: Kube
) -> None:
    first, second = teams
    started = time.monotonic()
    submitted = tfd(first, "submit", "--run-id", "a1", "--timeout", "10m", timeout=900)
    out = submitted.stdout + submitted.stderr
    assert submitted.returncode == 0, out[-3000:]
    log_figure("GPU queue: team a's tfd submit to training", time.monotonic() - started)
    assert worker_names(kube, NAMESPACES[0]) == [f"tfd-worker-{n}" for n in range(WORKERS)]
    assert assigned_flavor(kube, NAMESPACES[0]) == FLAVOR, workload(kube, NAMESPACES[0])
    devices = devices_of(kube, NAMESPACES[0])
    assert set(devices.values()) == DEVICES, f"team a's devices: {devices}"
    print(f"[gpu output] team a's workers, devices allocated by the kubelet: {devices}")

    waiting = Background(second, "submit", "--run-id", "b1", "--json", "--timeout", "10m")
    WAITING["b"] = waiting
    try:
        seen = kube.wait_for(
            "tfd status of team b: queued",
            lambda: (s := status(second))["phase"] == "queued" and s,
            180,
            2,
        )
    except BaseException:
        waiting.stop()
        raise
    human = tfd(second, "status")
    print(f"[tfd output] tfd status of team b:\n{human.stdout}")
    assert "queued" in human.stdout, human.stdout
    assert GPU_RESOURCE in seen["reason"], seen
    pods = kube.items("pod", NAMESPACES[1], "app.kubernetes.io/component=worker")
    gated = [p["metadata"]["name"] for p in pods if p["spec"].get("schedulingGates")]
    assert len(gated) == WORKERS and worker_names(kube, NAMESPACES[1]) == [], (
        f"team b's workers: gated {gated}, on the node {worker_names(kube, NAMESPACES[1])}"
    )
    assert condition(workload(kube, NAMESPACES[1]), "Admitted").get("status") != "True"


def test_when_the_first_run_stops_the_second_is_admitted_whole_on_the_freed_devices(
    teams: list[Project], kube: Kube
) -> None:
    first, second = teams
    waiting = WAITING["b"]
    try:
        stopped = tfd(first, "stop")
        assert stopped.returncode == 0, stopped.stderr
        started = time.monotonic()
        code = waiting.wait(900)
        log_figure("GPU queue: team a stopped to team b's tfd submit done (training)",
                   time.monotonic() - started)  # fmt: skip
    finally:
        waiting.stop()
    assert code == 0, f"team b's tfd submit exited {code}:\n{waiting.text()}"
    phases = [(d["phase"], d.get("reason", "")) for d in waiting.docs() if "phase" in d]
    queued = [why for phase, why in phases if phase == "queued"]
    print(f"[tfd output] team b's tfd submit while it waited: {queued[:1]}")
    assert queued and GPU_RESOURCE in queued[0], phases
    assert worker_names(kube, NAMESPACES[0]) == [], "team a's workers still on the node"
    assert worker_names(kube, NAMESPACES[1]) == [f"tfd-worker-{n}" for n in range(WORKERS)]
    assert assigned_flavor(kube, NAMESPACES[1]) == FLAVOR, workload(kube, NAMESPACES[1])
    devices = devices_of(kube, NAMESPACES[1])
    assert set(devices.values()) == DEVICES, f"team b's devices: {devices}"
    print(f"[gpu output] team b's workers, devices allocated by the kubelet: {devices}")
    assert tfd(second, "stop").returncode == 0
