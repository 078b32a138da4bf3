"""A queued run on the real node (docs/queue.md), run as users run it (``python -m tfd``):
Kueue admits the stack's two workers as one group and they train; ``tfd submit --continue --set
replicas=1`` resizes the run through zero (the workers checkpoint on SIGTERM, the StatefulSet
goes to zero, Kueue admits the new count as a new group), and training resumes from the step it
stopped at, at the new world size. A second team's run of a higher WorkloadPriorityClass then
preempts it: its worker checkpoints on SIGTERM and waits in the queue (``tfd status``: queued),
and when the higher run stops it is admitted again and resumes from its step.

Kueue runs on the host (``tools/kueue.py``); the platform's objects are a ResourceFlavor with no
node labels, a ClusterQueue of CPU and memory with room for one run of two workers (the real
node has no GPU quota to share) that preempts lower priorities, and two priority classes. The
tests run in file order (each step needs the one before).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

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
from tests.e2e.test_real_tfd import current_events
from tests.e2e.test_real_training import log_figure, node_image  # noqa: F401 - fixture
from tests.e2e.test_tfd import project_with_program, status, tfd
from tools.kueue import Kueue

pytestmark = [pytest.mark.real_node, pytest.mark.timeout(1200)]
NS, HIGH_NS = "tfd-real-queue", "tfd-real-queue-high"
RUN_ID = "q1"
QUEUE, CLUSTER_QUEUE, FLAVOR = "team", "tfd-cpus", "cpu"
LOW, HIGH = "tfd-low", "tfd-high"
CHECKPOINT_EVERY = 20
EPOCHS = 400
"""40,000 steps: one worker alone took about 130 a second here (3,000 in 22 s), and the run
must still train when the higher run preempts it (the tests stop each run; none finishes)."""
PLATFORM = {
    "apiVersion": "v1",
    "kind": "List",
    "items": [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
         "metadata": {"name": FLAVOR}, "spec": {}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
         "metadata": {"name": CLUSTER_QUEUE},
         "spec": {"namespaceSelector": {}, "resourceGroups": [{
             "coveredResources": ["cpu", "memory"],
             # Two workers of realnode.stack_settings (250m, 512Mi each): one run's worth.
             "flavors": [{"name": FLAVOR, "resources": [
                 {"name": "cpu", "nominalQuota": "500m"},
                 {"name": "memory", "nominalQuota": "1Gi"},
             ]}],
         }], "preemption": {"withinClusterQueue": "LowerPriority"}}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass",
         "metadata": {"name": LOW}, "value": 100},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass",
         "metadata": {"name": HIGH}, "value": 1000},
    ],
}  # fmt: skip


@pytest.fixture(scope="module")
def platform(kueue: Kueue, kube: Kube) -> Iterator[None]:  # noqa: F811 - the fixture
    yield from platform_objects(kube, PLATFORM, CLUSTER_QUEUE)


@pytest.fixture(scope="module")
def project(
    new_project: Callable[..., Project],
    node_image: str,  # noqa: F811 - the fixture
    platform: None,
) -> Iterator[Project]:
    yield from queued_stack(new_project, "tfdrealq", NS, node_image, LOW)


@pytest.fixture(scope="module")
def high(
    new_project: Callable[..., Project],
    node_image: str,  # noqa: F811 - the fixture
    platform: None,
) -> Iterator[Project]:
    yield from queued_stack(new_project, "tfdrealqhigh", HIGH_NS, node_image, HIGH)


def queued_stack(
    new_project: Callable[..., Project], name: str, namespace: str, image: str, priority: str
) -> Iterator[Project]:
    settings = {
        "stepsPerEpoch": 100, "checkpointEvery": CHECKPOINT_EVERY, "epochs": EPOCHS,
        "autoscalingEnabled": False, "queueName": QUEUE, "queueClusterQueue": CLUSTER_QUEUE,
        "queuePriorityClass": priority,
    }  # fmt: skip
    stack = realnode.real_stack(new_project, name, namespace, image, settings)
    yield project_with_program(stack)
    try:  # while Kueue still runs: its finalizers on the pods and the LocalQueue need it
        stack.destroy()
    except Exception as exc:  # noqa: BLE001 - the session's cleanup tries again
        print(f"destroy of {stack.stack.name}: {exc}")


def worker_names(kube: Kube, namespace: str = NS) -> list[str]:
    """The workers scheduled to the node (a gated or unscheduled pod has no node)."""
    pods = kube.items("pod", namespace, "app.kubernetes.io/component=worker")
    return sorted(p["metadata"]["name"] for p in pods if p["spec"].get("nodeName"))


def steps_past(project: Project, step: int) -> Callable[[], dict | None]:
    """A probe: the run's ``tfd status --json`` once its step is at least ``step``."""

    def probe() -> dict | None:
        seen = status(project)
        return seen if (seen.get("step") or 0) >= step else None

    return probe


def events_of(project: Project, kind: str) -> list[dict[str, Any]]:
    return [e for e in current_events(project, 0) if e["event"] == kind]


def test_a_queued_run_is_admitted_as_one_group_and_trains(project: Project, kube: Kube) -> None:
    started = time.monotonic()
    submitted = tfd(project, "submit", "--run-id", RUN_ID, "--timeout", "10m", timeout=900)
    out = submitted.stdout + submitted.stderr
    assert submitted.returncode == 0, out[-3000:]
    log_figure("queued run: tfd submit to training (admitted as one group)",
               time.monotonic() - started)  # fmt: skip
    wl = workload(kube, NS)
    assert [ps.get("count") for ps in wl["spec"]["podSets"]] == [2], wl["spec"]["podSets"]
    assert condition(wl, "Admitted").get("status") == "True", wl["status"]
    assert worker_names(kube) == ["tfd-worker-0", "tfd-worker-1"]


def test_a_resize_goes_through_zero_and_resumes_from_its_step_at_the_new_world_size(
    project: Project, kube: Kube
) -> None:
    probe = steps_past(project, 2 * CHECKPOINT_EVERY)
    before = kube.wait_for("two checkpoints' worth of steps", probe, 300, 2)
    started = time.monotonic()
    resized = tfd(project, "submit", "--continue", "--set", "replicas=1", "--timeout", "10m",
                  timeout=900)  # fmt: skip
    took = time.monotonic() - started
    out = resized.stdout + resized.stderr
    said = [line for line in out.splitlines() if "queued stack" in line or "-> 0 workers" in line]
    print("[tfd output] tfd submit --continue --set replicas=1 of the queued run:\n"
          + "\n".join(said) + f"\n...\n{out[-1500:]}")  # fmt: skip
    assert resized.returncode == 0, out[-3000:]
    assert "stopping the run's 2 workers" in out, out[-3000:]
    assert f"resumed stopped run {RUN_ID}: 0 -> 1 workers" in out, out[-3000:]
    log_figure("queued resize 2 -> 1 through zero: tfd submit to training again", took)
    wl = workload(kube, NS)
    assert [ps.get("count") for ps in wl["spec"]["podSets"]] == [1], wl["spec"]["podSets"]
    assert condition(wl, "Admitted").get("status") == "True", wl["status"]
    assert worker_names(kube) == ["tfd-worker-0"]

    resumed = kube.wait_for("worker 0 resumed", lambda: events_of(project, "resume"), 300, 2)
    (start,) = kube.wait_for("worker 0 started", lambda: events_of(project, "start"), 120, 2)
    step = resumed[0]["step"]
    print(f"[real-node figure] queued resize: step {before['step']} seen before, resumed at "
          f"step {step} with {start['workers']} worker")  # fmt: skip
    # The SIGTERM checkpoint holds every step done before the stop: nothing is trained twice
    # beyond the step the last reading lagged behind.
    assert step >= before["step"], (step, before["step"])
    assert (start["workers"], start["start_step"]) == (1, step), start


def test_a_higher_priority_run_preempts_it_and_it_waits_queued(
    project: Project, high: Project, kube: Kube
) -> None:
    before = kube.wait_for("the low run training", steps_past(project, 1), 120, 2)
    started = time.monotonic()
    submitted = tfd(high, "submit", "--run-id", "h1", "--timeout", "10m", timeout=900)
    out = submitted.stdout + submitted.stderr
    assert submitted.returncode == 0, out[-3000:]
    log_figure("preemption: the higher run's tfd submit to training", time.monotonic() - started)
    assert worker_names(kube, HIGH_NS) == ["tfd-worker-0", "tfd-worker-1"]
    kube.wait_for("the preempted run's worker gone from the node",
                  lambda: worker_names(kube) == [], 120, 1)  # fmt: skip
    preempted = [
        e["message"] for e in kube.items("event", NS)
        if e["involvedObject"]["kind"] == "Workload" and e.get("reason") == "Preempted"
    ]  # fmt: skip
    evicted = condition(workload(kube, NS), "Evicted")
    assert preempted or evicted.get("reason") == "Preempted", (evicted, preempted)
    print(f"[real-node figure] Kueue on the low run: {preempted[-1] if preempted else evicted}")
    seen = kube.wait_for(
        "tfd status of the preempted run: queued",
        lambda: (s := status(project))["phase"] == "queued" and s,
        120,
        2,
    )
    human = tfd(project, "status")
    print(f"[tfd output] tfd status of the preempted run:\n{human.stdout}")
    assert "queued" in human.stdout, human.stdout
    PREEMPTED["step"] = before["step"]
    print(f"[real-node figure] preempted at step {before['step']} or later: {seen['reason']}")


PREEMPTED: dict[str, int] = {}
"""The step the preempted run had reached, from the test that preempts it to the one resuming."""


def test_the_preempted_run_resumes_from_its_step_when_the_higher_one_stops(
    project: Project, high: Project, kube: Kube
) -> None:
    stopped = tfd(high, "stop")
    assert stopped.returncode == 0, stopped.stderr
    started = time.monotonic()
    kube.wait_for("the preempted run's worker back on the node",
                  lambda: worker_names(kube) == ["tfd-worker-0"], 300, 1)  # fmt: skip
    admitted = time.monotonic() - started
    resumed = kube.wait_for("worker 0 resumed", lambda: events_of(project, "resume"), 300, 2)
    log_figure("preemption: the higher run stopped to the preempted one training again",
               time.monotonic() - started)  # fmt: skip
    step = resumed[0]["step"]
    print(
        f"[real-node figure] preempted run: re-admitted {admitted:.1f} s after the stop, "
        f"resumed at step {step} (seen at {PREEMPTED['step']} before the preemption)"
    )
    assert step >= PREEMPTED["step"], (step, PREEMPTED)
    assert condition(workload(kube, NS), "Admitted").get("status") == "True"
    assert tfd(project, "stop").returncode == 0
