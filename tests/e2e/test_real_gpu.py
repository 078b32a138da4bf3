"""GPU workers on the real node, whose GPUs are the stand-in device plugin's (``tools/devplugin``:
``STAND_IN_GPUS`` ``nvidia.com/gpu`` through the kubelet's device-plugin API, no real GPU).

A stack asking one GPU per worker for one worker more than the node has, on the node labelled
and tainted as a GPU pool (here only): ``tfd submit`` stops at the trainer's own line (its
TensorFlow sees no GPU), the worker beyond the devices stays Pending and ``tfd status`` says
why, the quota counts the GPUs; then ``allowCpuFallback`` (the stack key) and as many
workers as devices train to ``DONE``, each container given its own device by the kubelet.

The tests run in file order on one stack (each step needs the one before).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.e2e import realnode
from tests.e2e.harness import Kube, Project
from tests.e2e.test_image import built, docker  # noqa: F401 - fixtures and helper
from tests.e2e.test_real_training import log_figure, node_image  # noqa: F401 - fixture
from tests.e2e.test_tfd import project_with_program, tfd
from tools.real_node_config import GPU_RESOURCE, NODE_NAME, STAND_IN_GPUS

pytestmark = [pytest.mark.real_node, pytest.mark.timeout(900)]
NS = "tfd-gpu"
STS = "tfd-worker"
WORKERS = STAND_IN_GPUS + 1
LABEL, TAINT = "tfd-e2e/accelerator=stand-in", f"{GPU_RESOURCE}=present:NoSchedule"
GPU_LINE = "TFD_GPUS=1: the pod was given 1 GPU(s) but TensorFlow sees 0: check the node's NVIDIA"
INSUFFICIENT = f"0/1 nodes are available: 1 Insufficient {GPU_RESOURCE}"
QUOTA_KEY = f"requests.{GPU_RESOURCE}"
SEEN: dict[str, Any] = {}


@pytest.fixture(scope="module")
def gpu_node(kube: Kube, real_node: str) -> Iterator[str]:
    """The real node as a GPU pool: labelled and tainted for this module only."""
    kube.run("label", "node", real_node, LABEL, "--overwrite")
    kube.run("taint", "node", real_node, TAINT, "--overwrite")
    try:
        yield real_node
    finally:
        kube.run("taint", "node", real_node, f"{TAINT.rsplit('=', 1)[0]}:NoSchedule-", check=False)
        kube.run("label", "node", real_node, f"{LABEL.split('=')[0]}-", check=False)


@pytest.fixture(scope="module")
def project(new_project: Callable[..., Project], node_image: str, gpu_node: str) -> Project:  # noqa: F811
    settings = {
        "replicas": WORKERS,
        "autoscalingEnabled": False,
        "gpusPerWorker": 1,
        "gpuNodeSelector": [LABEL],
        "gpuTolerations": [TAINT],
        "epochs": 1,
        "stepsPerEpoch": 20,
        "checkpointEvery": 10,
        # The pods stay up once done: the test reads their environment and logs then.
        "onDone": "idle",
    }
    stack = realnode.real_stack(new_project, "realgpu", NS, node_image, settings)
    return project_with_program(stack)


def worker(kube: Kube, n: int) -> dict:
    pod = kube.get("pod", f"{STS}-{n}", NS)
    assert pod is not None, f"no pod {STS}-{n}"
    return pod


def exit_code(pod: dict) -> int | None:
    for st in pod["status"].get("containerStatuses") or []:
        for state in (st.get("state") or {}, st.get("lastState") or {}):
            if "terminated" in state:
                return int(state["terminated"]["exitCode"])
    return None


def error_lines(kube: Kube, pod: str) -> list[str]:
    """The ``trainer: error:`` lines of the pod's current or last container."""
    for extra in ((), ("--previous",)):
        text = kube.run("logs", "-n", NS, pod, *extra, check=False)
        lines = [ln for ln in text.splitlines() if ln.startswith("trainer: error:")]
        if lines:
            return lines
    return []


def quota(kube: Kube) -> tuple[str, str]:
    (q,) = kube.items("resourcequota", NS)
    return q["status"]["used"][QUOTA_KEY], q["status"]["hard"][QUOTA_KEY]


def allocated_on_node(kube: Kube) -> str:
    """The node's ``Allocated resources`` line of the GPU resource (kubectl describe)."""
    text = kube.run("describe", "node", NODE_NAME)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip().startswith(GPU_RESOURCE)]
    return lines[-1] if lines else ""


def test_workers_without_a_visible_gpu_stop_and_the_one_beyond_the_devices_waits(
    project: Project, kube: Kube
) -> None:
    node = kube.get("node", NODE_NAME)
    assert node["status"]["allocatable"][GPU_RESOURCE] == str(STAND_IN_GPUS), node["status"]
    started = time.monotonic()
    result = tfd(project, "submit", "--run-id", "gpu", "--timeout", "5m", timeout=600)
    log_figure("tfd submit of GPU workers to its exit on their error", time.monotonic() - started)
    out = result.stdout + result.stderr
    assert result.returncode == 1, out[-3000:]
    assert GPU_LINE in result.stderr, out[-3000:]
    assert "pulumi up stopped waiting for the workers" in result.stderr, out[-3000:]
    assert "Traceback" not in out, out[-3000:]

    def placed_and_stopped() -> tuple[list[dict], dict] | None:
        # Which worker the scheduler leaves out is its choice: any one of the three.
        pods = [worker(kube, n) for n in range(WORKERS)]
        placed = [p for p in pods if p["spec"].get("nodeName")]
        waiting = [p for p in pods if not p["spec"].get("nodeName")]
        if len(placed) != STAND_IN_GPUS or any(exit_code(p) is None for p in placed):
            return None
        return placed, waiting[0]

    placed, beyond = kube.wait_for("GPU workers placed and stopped", placed_and_stopped, 120, 2)
    for pod in placed:
        name = pod["metadata"]["name"]
        limits = pod["spec"]["containers"][0]["resources"]["limits"]
        assert limits[GPU_RESOURCE] == "1", limits
        assert pod["spec"]["nodeName"] == NODE_NAME, pod["spec"].get("nodeName")
        assert exit_code(pod) == 3, pod["status"]
        lines = error_lines(kube, name)
        assert len(lines) == 1 and GPU_LINE in lines[0], lines
        assert "runtimeClassName nvidia" in lines[0] and "GPU build" in lines[0], lines[0]
    SEEN["line"] = lines[0]
    assert beyond["status"]["phase"] == "Pending", beyond["status"]
    unplaced = int(beyond["metadata"]["name"].rsplit("-", 1)[1])
    # The quota admits every worker's GPU, the Pending one's too (it counts pods, not devices).
    assert quota(kube) == (str(WORKERS), str(WORKERS)), quota(kube)
    SEEN["quota"] = quota(kube)
    SEEN["allocated"] = allocated_on_node(kube)
    assert re.fullmatch(rf"{re.escape(GPU_RESOURCE)}\s+{STAND_IN_GPUS}\s+{STAND_IN_GPUS}",
                        SEEN["allocated"]), SEEN["allocated"]  # fmt: skip

    human = tfd(project, "status")
    assert human.returncode == 0, human.stderr
    head = human.stdout.splitlines()[0]
    assert re.match(r"failed: worker [0-9] exited 3: TFD_GPUS=1: ", head), head
    assert f"; also worker {unplaced} not scheduled: {INSUFFICIENT}" in head, head
    SEEN["status"] = head
    print(f"[tfd output] tfd status:\n{human.stdout}")
    print(f"[gpu output] the trainer's line: {lines[0]}")
    print(f"[gpu output] quota {QUOTA_KEY} used/hard: {'/'.join(SEEN['quota'])}; node: "
          f"{SEEN['allocated']}")  # fmt: skip


def test_cpu_fallback_trains_to_done_one_device_per_worker(project: Project, kube: Kube) -> None:
    started = time.monotonic()
    # A new run (its StatefulSet replaced, created at the new size). A `--continue` at the lower
    # count meets the new template (TFD_REPLICAS=2) while the StatefulSet still counts 3 (the
    # size patch waits for the rollout): worker 2 then waits as surplus (trainer.lifecycle),
    # which this scenario does not exercise.
    result = tfd(
        project, "submit", "--run-id", "gpu-cpu", "--set", "allowCpuFallback=true",
        "--set", f"replicas={STAND_IN_GPUS}", "--follow", "--timeout", "8m", timeout=720,
    )  # fmt: skip
    log_figure("tfd submit of a new run with the CPU fallback to DONE", time.monotonic() - started)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    assert "\ndone: the run finished" in result.stdout, out[-3000:]
    devices = {}
    for n in range(STAND_IN_GPUS):
        pod = f"{STS}-{n}"
        code, env = realnode.exec_in(kube, pod, NS, "printenv NVIDIA_VISIBLE_DEVICES")
        assert code == 0, env
        devices[pod] = env.strip()
        events = [json.loads(ln) for ln in kube.run("logs", "-n", NS, pod).splitlines()
                  if ln.startswith('{"')]  # fmt: skip
        fallback = [e for e in events if e.get("event") == "cpu_fallback"]
        assert fallback and fallback[0]["gpus_given"] == 1, [e.get("event") for e in events]
        assert fallback[0]["gpus_seen"] == 0, fallback[0]
    # One device each, every device used: the kubelet's allocation through the plugin.
    expected = {f"stand-in-gpu-{i}" for i in range(STAND_IN_GPUS)}
    assert set(devices.values()) == expected, devices
    assert quota(kube) == (str(STAND_IN_GPUS), str(STAND_IN_GPUS)), quota(kube)
    assert kube.get("pod", f"{STS}-{STAND_IN_GPUS}", NS) is None, "the third worker is still there"
    print(f"[gpu output] devices allocated: {devices}; quota {QUOTA_KEY} used/hard: "
          f"{'/'.join(quota(kube))}; node: {allocated_on_node(kube)}")  # fmt: skip


def test_destroy_frees_the_devices(project: Project, kube: Kube) -> None:
    project.destroy()
    kube.wait_for("no worker pod", lambda: not kube.items("pods", NS), 120, 1)
    allocated = allocated_on_node(kube)
    assert re.fullmatch(rf"{re.escape(GPU_RESOURCE)}\s+0\s+0", allocated), allocated
