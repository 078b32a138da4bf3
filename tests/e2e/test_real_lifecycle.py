"""The run's lifecycle with real pods: a rollout mid-run restarts every worker once and training
resumes; a deleted pod comes back and the others resume in place, while an eviction (a drain)
is refused by the PodDisruptionBudget; an HPA resize restarts the trainer inside its container
(no container restart, so no CrashLoopBackOff) and the run finishes at the new world size; the
finished run scales itself to zero, `pulumi preview` shows no changes and the HPA leaves it
there; a new run id trains from step 0 in its own directory.

The tests run in file order on one stack (each step needs the one before).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest

from tests.e2e import realnode
from tests.e2e.harness import PROJECT, Kube, Project
from tests.e2e.test_image import built, docker  # noqa: F401 - fixtures and helper
from tests.e2e.test_real_training import log_figure, node_image  # noqa: F401 - fixture
from trainer import contract
from trainer.errors import EXIT_NOT_ADMITTED
from trainer.local_cluster import parse_events

# One long run through every phase; each test waits for its phase (default limit: 300 s).
pytestmark = [pytest.mark.real_node, pytest.mark.timeout(2400)]
NS = "tfd-cycle"
STS = "tfd-worker"
STEPS_PER_EPOCH, CHECKPOINT_EVERY = 100, 20
EPOCHS = 72
"""Long enough for a rollout, a pod deletion and an HPA resize to happen mid-run. The resize
comes some 150 s after the start; an idle machine trains about 32 steps a second at 2 workers
(12 epochs once finished before the resize), a loaded one 5 (hence the long waits below). Once
three workers train, the rest of 72 epochs is only waiting (some 1,000 s at 3 workers on 2 cores):
:func:`shorten_the_run` ends it a few minutes after the resize."""
SHORTENED_MARGIN_S = 180
"""Training time left to the shortened run: more than its rollout takes to reach every worker
(a worker still on the old epochs must not pass the new end before it is replaced)."""
NEW_RUN_EPOCHS = 1
HPA_WINDOW_S = 60
"""autoscalingScaleUpWindowSeconds, its minimum: the resize happens a minute after the target."""


@pytest.fixture(scope="module")
def stack(new_project: Callable[..., Project], node_image: str) -> Project:  # noqa: F811
    settings = {
        "epochs": EPOCHS,
        "stepsPerEpoch": STEPS_PER_EPOCH,
        "checkpointEvery": CHECKPOINT_EVERY,
        "autoscalingMinReplicas": 2,
        "autoscalingMaxReplicas": 3,
        # No resize until the resize test lowers the target: a worker at its 1-CPU limit is
        # exactly at 100 % of it (the HPA tolerates 10 %).
        "autoscalingCpuLimitUtilization": 100,
        "autoscalingScaleUpWindowSeconds": HPA_WINDOW_S,
    }
    return realnode.real_stack(new_project, "cycle", NS, node_image, settings)


def metrics_of(kube: Kube, pod: str) -> dict[str, float]:
    return realnode.pod_metrics(kube, NS, pod)


def metric(kube: Kube, pod: str, name: str) -> float:
    """``pod``'s sample of ``name``, from an answer: a pod that does not answer for a moment
    (its trainer restarting) has no sample, which must not read as 0 (a later count would be
    compared with a baseline below the real one)."""

    def probe() -> dict[str, float] | None:
        found = metrics_of(kube, pod)
        return found if name in found else None

    return kube.wait_for(f"{name} of {pod}", probe, 120, 2)[name]


def supervisor_restarts(kube: Kube, pod: str) -> float:
    return metric(kube, pod, contract.METRIC_SUPERVISOR_RESTARTS)


def hpa_scaling_disabled(kube: Kube) -> bool:
    """The HPA says it leaves its target alone: ``ScalingActive`` False, ``ScalingDisabled``
    (what it sets on a sync that finds the target at zero replicas)."""
    conditions = (kube.get("hpa", STS, NS).get("status") or {}).get("conditions", [])
    return any(
        c["type"] == "ScalingActive" and c["status"] == "False" and c["reason"] == "ScalingDisabled"
        for c in conditions
    )


def pod_creations(kube: Kube) -> dict[str, int]:
    """How many times the StatefulSet controller has created each worker pod (its
    ``SuccessfulCreate`` events; the recorder folds repeats into ``count``)."""
    made: dict[str, int] = {}
    for event in kube.items("events", NS):
        involved = event["involvedObject"]
        if involved.get("kind") != "StatefulSet" or event.get("reason") != "SuccessfulCreate":
            continue
        # "create Pod tfd-worker-0 in StatefulSet tfd-worker successful"
        words = event.get("message", "").split()
        if len(words) > 2 and words[:2] == ["create", "Pod"]:
            times = (event.get("series") or {}).get("count") or event.get("count") or 1
            made[words[2]] = made.get(words[2], 0) + times
    return made


def workers(kube: Kube) -> dict[str, dict]:
    return {
        p["metadata"]["name"]: p
        for p in kube.items("pods", NS)
        if p["metadata"]["name"].startswith(f"{STS}-")
    }


def restarts_and_waits(kube: Kube) -> dict[str, tuple[int, str]]:
    """Per pod: the container's restart count and why it waits, if it does."""
    out = {}
    for name, pod in workers(kube).items():
        (status,) = pod["status"].get("containerStatuses") or [{}]
        waiting = (status.get("state") or {}).get("waiting") or {}
        out[name] = (status.get("restartCount", 0), waiting.get("reason", ""))
    return out


@pytest.fixture(scope="module")
def training(stack: Project, kube: Kube) -> dict:
    started = time.monotonic()
    stack.up()
    kube.wait_for(
        "both workers past their first checkpoint",
        lambda: all(
            metrics_of(kube, f"{STS}-{i}").get(contract.METRIC_CHECKPOINT_STEP, 0) > 0
            for i in (0, 1)
        ),
        600, 2,
    )  # fmt: skip
    log_figure("lifecycle stack: pulumi up to the first checkpoint", time.monotonic() - started)
    return {"started": started}


def test_a_rollout_restarts_every_worker_once_and_resumes(
    training: dict,
    stack: Project,
    kube: Kube,
    node_image: str,  # noqa: F811
) -> None:
    before = {n: p["metadata"]["uid"] for n, p in workers(kube).items()}
    assert sorted(before) == [f"{STS}-0", f"{STS}-1"], before
    # A new tag of the same image: a new pod template, as a rebuilt image would make.
    rolled = f"{node_image}-rollout"
    realnode.ctr("images", "tag", "--force", f"docker.io/library/{node_image}",
                 f"docker.io/library/{rolled}")  # fmt: skip
    stack.set("imageReference", rolled)
    created_before = pod_creations(kube)
    started = time.monotonic()
    stack.up()
    # The new template's revision: up returns before the controller has seen the new spec.
    revision = kube.observed_statefulset(STS, NS)["status"]["updateRevision"]

    def replaced_and_resumed() -> bool:
        now = workers(kube)
        return (
            sorted(now) == sorted(before)
            and all(p["metadata"]["uid"] != before[n] for n, p in now.items())
            and all(
                p["metadata"]["labels"]["controller-revision-hash"] == revision
                for p in now.values()
            )
            and metrics_of(kube, f"{STS}-0").get(contract.METRIC_RESUMES_TOTAL, 0) >= 1
        )

    kube.wait_for("both workers replaced and training resumed", replaced_and_resumed, 600, 2)
    log_figure("rollout: pulumi up to training resumed on the new pods", time.monotonic() - started)
    images = {p["spec"]["containers"][0]["image"] for p in workers(kube).values()}
    assert images == {rolled}, images
    assert all(r == (0, "") for r in restarts_and_waits(kube).values()), restarts_and_waits(kube)
    # Exactly once: each worker pod was created again once, not replaced twice on the way.
    after = pod_creations(kube)
    again = {n: after.get(n, 0) - created_before.get(n, 0) for n in sorted(before)}
    assert again == dict.fromkeys(sorted(before), 1), f"pods created during the rollout: {again}"


def test_a_deleted_pod_comes_back_and_an_eviction_is_refused(training: dict, kube: Kube) -> None:
    chief = f"{STS}-0"
    restarts = supervisor_restarts(kube, chief)
    # A drain evicts: the PodDisruptionBudget (maxUnavailable 0) refuses while the job runs.
    refused = kube.run(
        "create", "--raw", f"/api/v1/namespaces/{NS}/pods/{STS}-1/eviction", "-f", "-",
        stdin=json.dumps({"apiVersion": "policy/v1", "kind": "Eviction",
                          "metadata": {"name": f"{STS}-1", "namespace": NS}}),
        check=False,
    )  # fmt: skip
    assert "disruption budget" in refused, refused
    uid = kube.get("pod", f"{STS}-1", NS)["metadata"]["uid"]
    started = time.monotonic()
    kube.run("delete", "pod", f"{STS}-1", "-n", NS, "--wait=false")

    def back_and_training() -> bool:
        pod = kube.get("pod", f"{STS}-1", NS)
        return (
            pod is not None
            and pod["metadata"]["uid"] != uid
            and metrics_of(kube, chief).get(contract.METRIC_SUPERVISOR_RESTARTS, 0) > restarts
            and metrics_of(kube, f"{STS}-1").get(contract.METRIC_RESUMES_TOTAL, 0) >= 1
        )

    kube.wait_for("worker 1 recreated and both resumed", back_and_training, 600, 2)
    log_figure("pod deletion to both workers resumed", time.monotonic() - started)
    waits = restarts_and_waits(kube)
    assert waits[chief] == (0, ""), f"the chief's container restarted: {waits}"


def test_an_hpa_resize_restarts_the_trainer_in_place(
    training: dict, stack: Project, kube: Kube
) -> None:
    before = {n: p["metadata"]["uid"] for n, p in workers(kube).items()}
    restarts = supervisor_restarts(kube, f"{STS}-0")
    stack.set("autoscalingCpuLimitUtilization", 1)
    started = time.monotonic()
    stack.up()
    kube.wait_for(
        "the HPA scaled the workers to 3",
        lambda: kube.get("statefulset.apps", STS, NS)["spec"]["replicas"] == 3,
        HPA_WINDOW_S + 240, 2,
    )  # fmt: skip
    log_figure("resize: target lowered to the HPA's scale-up", time.monotonic() - started)

    def three_training() -> bool:
        # The world size is known before the first step; steps run by the process are not.
        return all(
            (m := metrics_of(kube, f"{STS}-{i}")).get(contract.METRIC_WORLD_SIZE, 0) == 3
            and m.get(contract.METRIC_STEPS_TOTAL, 0) > 0
            for i in range(3)
        )

    kube.wait_for("three workers training together", three_training, 600, 2)
    log_figure("resize: scale-up to three workers training", time.monotonic() - started)
    joined = parse_events(kube.run("logs", "-n", NS, f"{STS}-2").splitlines(), "restart")
    waits = [e.get("wait_s") for e in joined if e["code"] == EXIT_NOT_ADMITTED]
    print(f"[real-node figure] resize: worker 2 restarts {len(joined)}, of which waiting for "
          f"the others (exit 77) {len(waits)}, waits {waits}")  # fmt: skip
    now = workers(kube)
    for name, uid in before.items():
        assert now[name]["metadata"]["uid"] == uid, f"{name} was recreated by the resize"
    containers = restarts_and_waits(kube)
    assert all(r == (0, "") for r in containers.values()), f"container restarts: {containers}"
    restarted = supervisor_restarts(kube, f"{STS}-0")
    assert restarted > restarts, "the supervisor did not restart the trainer for the new size"


def shorten_the_run(training: dict, stack: Project, kube: Kube) -> None:
    """Lower the running run's epochs to end :data:`SHORTENED_MARGIN_S` from now at its pace.

    The epochs are not a result field (``trainer.manifest``): a lower value is a rollout of the
    same run, as a user stops a run early. ``replicas: 3`` keeps the new run target's size patch
    at the HPA's count, so the run still ends with three workers.
    """
    training["epochs"] = EPOCHS
    first, started = metric(kube, f"{STS}-0", contract.METRIC_STEP), time.monotonic()
    time.sleep(20)
    rate = (metric(kube, f"{STS}-0", contract.METRIC_STEP) - first) / (time.monotonic() - started)
    end = first + rate * (time.monotonic() - started + SHORTENED_MARGIN_S)
    epochs = min(EPOCHS, int(end) // STEPS_PER_EPOCH + 1)
    print(f"[real-node figure] lifecycle stack: {rate:.1f} steps/s at 3 workers; "
          f"epochs {EPOCHS} -> {epochs}")  # fmt: skip
    if rate > 0 and epochs < EPOCHS:
        stack.set_many({"epochs": epochs, "replicas": 3})
        stack.up()
        training["epochs"] = epochs


def test_the_finished_run_frees_its_pods_and_stays_without_diff(
    training: dict, stack: Project, kube: Kube
) -> None:
    shorten_the_run(training, stack, kube)
    claim = kube.items("persistentvolumeclaim", NS)[0]["metadata"]["name"]
    # The stacks' layout: <claim>/<project>/<stack>/<runId> (infra.workers.checkpoint_dir).
    run_dir = realnode.volume_dir(kube, NS, claim) / PROJECT / stack.stack.name / "1"
    kube.wait_for(f"DONE in {run_dir}", lambda: (run_dir / contract.DONE_MARKER).exists(), 2000, 2)
    done_at = time.monotonic()
    log_figure("lifecycle stack: pulumi up to DONE", done_at - training["started"])
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["workers"] == 3, summary
    assert summary["final_step"] == training["epochs"] * STEPS_PER_EPOCH, summary
    kube.wait_for("no worker pod left", lambda: not workers(kube), 300, 2)
    kube.wait_for("no container of the stack runs", lambda: not realnode.running_tasks(NS), 120)
    log_figure("DONE to every worker pod gone", time.monotonic() - done_at)
    assert kube.get("statefulset.apps", STS, NS)["spec"]["replicas"] == 0
    stack.preview(expect_no_changes=True)
    # The HPA's own word that it saw the target at zero and leaves it (its syncs after the
    # scale to zero), not a sleep that a loaded controller manager may sleep through.
    kube.wait_for("the HPA reports scaling disabled", lambda: hpa_scaling_disabled(kube), 120, 2)
    assert kube.get("statefulset.apps", STS, NS)["spec"]["replicas"] == 0, "the HPA revived it"


def test_more_epochs_continue_the_finished_run_under_its_autoscaler(
    training: dict, stack: Project, kube: Kube
) -> None:
    # The HPA does nothing for a target at zero: the new target's size patch brings it back.
    epochs = training["epochs"] + 1
    stack.set_many({"epochs": epochs, "autoscalingCpuLimitUtilization": 100})
    claim = kube.items("persistentvolumeclaim", NS)[0]["metadata"]["name"]
    summary_file = realnode.volume_dir(kube, NS, claim) / PROJECT / stack.stack.name / "1"
    summary_file /= "summary.json"
    started = time.monotonic()
    stack.up()

    def continued() -> dict | None:
        try:
            summary = json.loads(summary_file.read_text())
        except (OSError, ValueError):  # being rewritten
            return None
        return summary if summary["final_step"] == epochs * STEPS_PER_EPOCH else None

    kube.wait_for("the continued run's DONE", continued, 900, 2)
    log_figure("lifecycle stack: continue with one more epoch to DONE", time.monotonic() - started)
    kube.wait_for("no worker pod left", lambda: not workers(kube), 300, 2)


def test_a_new_run_id_trains_from_step_zero_in_its_own_directory(
    training: dict, stack: Project, kube: Kube
) -> None:
    stack.set_many({"runId": "2", "epochs": NEW_RUN_EPOCHS, "autoscalingCpuLimitUtilization": 100})
    claim = kube.items("persistentvolumeclaim", NS)[0]["metadata"]["name"]
    # The stacks' layout: <claim>/<project>/<stack>/<runId> (infra.workers.checkpoint_dir).
    run_dir = realnode.volume_dir(kube, NS, claim) / PROJECT / stack.stack.name / "2"
    assert not run_dir.exists(), f"{run_dir} exists before the run"
    started = time.monotonic()
    stack.up()
    kube.wait_for(f"DONE in {run_dir}", lambda: (run_dir / contract.DONE_MARKER).exists(), 900, 2)
    log_figure("new run: pulumi up to DONE", time.monotonic() - started)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["final_step"] == NEW_RUN_EPOCHS * STEPS_PER_EPOCH, summary
    # Run 1 ended at its final step (training["epochs"] epochs): this one started from nothing.
    assert summary["run_id"] == "2", summary
    kube.wait_for("no worker pod left", lambda: not workers(kube), 300, 2)
    stack.destroy()
