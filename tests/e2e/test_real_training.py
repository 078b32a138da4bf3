"""The product on a real node: ``pulumi up`` of a dev-like stack, two workers that find each
other by their stable DNS names and train to ``DONE``, a worker killed with SIGKILL that
resumes, the NetworkPolicy enforced, ``/metrics`` through the Service, ``pulumi destroy``.

The tests run in file order on one stack (each step needs the one before); the image is the
repository's Dockerfile built by ``docker build`` and imported into the node's containerd.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e import realnode
from tests.e2e.harness import Kube, Project
from tests.e2e.test_image import REPOSITORY, built, docker  # noqa: F401 - fixture
from trainer import contract

pytestmark = pytest.mark.real_node
NS = "tfd-real"
STS = "tfd-worker"
SERVICE = "tfd-workers"
EPOCHS, STEPS_PER_EPOCH, CHECKPOINT_EVERY = 12, 100, 25
"""Long enough that the kill -9 below happens mid-run: at 3 epochs an idle machine once
finished the run (300 steps in about 15 s) before the test could kill a worker."""
TOTAL_STEPS = EPOCHS * STEPS_PER_EPOCH
WORKERS = "app.kubernetes.io/component=worker,app.kubernetes.io/instance=tfd"
FIGURES: dict[str, float] = {}


def log_figure(name: str, seconds: float) -> None:
    FIGURES[name] = round(seconds, 1)
    print(f"[real-node figure] {name}: {seconds:.1f} s")


@pytest.fixture(scope="module")
def node_image(built: str, real_node: str) -> str:  # noqa: F811 - the fixture
    """The built trainer image, in the node's containerd under a tag naming the build."""
    reference = f"{REPOSITORY}:{built.removeprefix('sha256:')[:12]}"
    seconds = realnode.load_image(built, reference)
    if seconds is not None:
        log_figure("docker save | ctr import of the trainer image", seconds)
    return reference


@pytest.fixture(scope="module")
def stack(new_project: Callable[..., Project], node_image: str) -> Project:
    settings = {
        "epochs": EPOCHS,
        "stepsPerEpoch": STEPS_PER_EPOCH,
        "checkpointEvery": CHECKPOINT_EVERY,
        # No HPA: the count is the stack's (the lifecycle stack has one); this stack also proves
        # that a finished run stays finished through a refresh and continues with more epochs.
        "autoscalingEnabled": False,
    }
    return realnode.real_stack(new_project, "real", NS, node_image, settings)


def metrics_of(kube: Kube, pod: str) -> dict[str, float]:
    return realnode.pod_metrics(kube, NS, pod)


@pytest.fixture(scope="module")
def deployed(stack: Project, kube: Kube) -> dict:
    started = time.monotonic()
    stack.up()
    log_figure("pulumi up", time.monotonic() - started)

    def first_step() -> bool:
        return metrics_of(kube, f"{STS}-0").get(contract.METRIC_STEP, 0) >= 1

    kube.wait_for("worker 0 at step 1", first_step, 600, 2)
    log_figure("pulumi up start to the first step", time.monotonic() - started)
    return {"started": started}


def test_two_workers_run_on_the_node_and_train(deployed: dict, kube: Kube, real_node: str) -> None:
    pods = kube.items("pods", NS, f"app.kubernetes.io/name={STS}") or kube.items("pods", NS)
    workers = sorted(p["metadata"]["name"] for p in pods if p["metadata"]["name"].startswith(STS))
    assert workers == [f"{STS}-0", f"{STS}-1"], workers
    for pod in pods:
        assert pod["spec"]["nodeName"] == real_node
        assert pod["status"]["phase"] == "Running", pod["status"]


def test_workers_reach_each_other_by_stable_names_and_others_are_denied(
    deployed: dict, kube: Kube
) -> None:
    peer = f"{STS}-1.{SERVICE}.{NS}.svc.cluster.local"
    code, out = realnode.exec_in(
        kube, f"{STS}-0", NS,
        "python3 -c \"import socket,sys; s=socket.create_connection((sys.argv[1], "
        f"{contract.DEFAULT_GRPC_PORT}), 5); print('connected', s.getpeername())\" {peer}",
    )  # fmt: skip
    assert code == 0 and "connected" in out, f"worker 0 -> {peer}: {out}"
    # A pod without the workers' labels, in the workers' namespace: gRPC and metrics dropped.
    # The namespace's quota has room for the workers only: room for one more pod (count, CPU
    # and memory), for this test alone, and exactly the stack's quota again afterwards.
    hard = kube.get("resourcequota", "tfd-workers", NS)["spec"]["hard"]
    roomy = {k: ("10" if k == "pods" else "100Gi" if "memory" in k else "100") for k in hard}
    kube.run("patch", "resourcequota", "tfd-workers", "-n", NS, "--type=merge", "-p",
             json.dumps({"spec": {"hard": roomy}}))  # fmt: skip
    try:
        # Admission checks a pod against the quota's status.hard, which the quota controller
        # copies from the spec a moment later: until then the intruder is refused.
        kube.wait_for("the roomy quota in force", lambda: quota_in_force(kube), 120, 1)
        _intruder_is_denied(kube, peer)
    finally:
        kube.run("patch", "resourcequota", "tfd-workers", "-n", NS, "--type=merge", "-p",
                 json.dumps({"spec": {"hard": hard}}))  # fmt: skip


def quota_in_force(kube: Kube) -> bool:
    """The workers' quota's ``status.hard`` (what admission checks) is its ``spec.hard``."""
    quota = kube.get("resourcequota", "tfd-workers", NS)
    return (quota.get("status") or {}).get("hard") == quota["spec"]["hard"]


def _intruder_is_denied(kube: Kube, peer: str) -> None:
    realnode.apply(kube, realnode.busybox_pod("intruder", NS, "sleep 3600"))
    realnode.running(kube, "intruder", NS)
    code, out = realnode.exec_in(kube, "intruder", NS, f"nslookup {peer}")
    assert code == 0, f"DNS from a pod of the namespace: {out}"
    for port in (contract.DEFAULT_GRPC_PORT, contract.DEFAULT_METRICS_PORT):
        code, out = realnode.connect(kube, "intruder", NS, peer, port)
        assert code != 0 and ("refused" in out or "timed out" in out), f"intruder -> {port}: {out}"
    # Positive controls: both ports listen, so the refusals above are the policy's. gRPC: worker 0
    # reached worker 1 above; metrics: the node (the API server's proxy) reads worker 1's port.
    assert metrics_of(kube, f"{STS}-1").get(contract.METRIC_WORLD_SIZE) == 2, (
        f"{STS}-1 serves no metrics on {contract.DEFAULT_METRICS_PORT}: the refusal proves nothing"
    )
    kube.run("delete", "pod", "intruder", "-n", NS, "--grace-period=1", "--wait=true")


def test_metrics_through_the_service_carry_the_documented_series(
    deployed: dict, kube: Kube
) -> None:
    text = kube.run(
        "get", "--raw",
        f"/api/v1/namespaces/{NS}/services/{SERVICE}:{contract.METRICS_PORT_NAME}/proxy/metrics",
    )  # fmt: skip
    # Parsed, not searched: a HELP line, or a longer name that contains the documented one,
    # is no sample of the series.
    present = realnode.series_with_samples(text)
    missing = [name for name in contract.METRIC_NAMES if name not in present]
    assert not missing, f"series without a sample in /metrics through the Service: {missing}"


def test_a_worker_killed_with_sigkill_resumes_from_its_checkpoint(
    deployed: dict, kube: Kube
) -> None:
    kube.wait_for(
        "a first checkpoint",
        lambda: metrics_of(kube, f"{STS}-1").get(contract.METRIC_CHECKPOINT_STEP, 0) > 0,
        300, 1,
    )  # fmt: skip
    pid = realnode.container_pid(NS, f"{STS}-1")
    os.kill(pid, 9)
    killed_at = time.monotonic()

    def resumed() -> float | None:
        m = metrics_of(kube, f"{STS}-1")
        return (
            m.get(contract.METRIC_RESUMES_TOTAL) if m.get(contract.METRIC_RESUMES_TOTAL) else None
        )

    kube.wait_for("worker 1 resumed from a checkpoint", resumed, 300, 2)
    log_figure("kill -9 of worker 1 to its resume", time.monotonic() - killed_at)
    pod = kube.get("pod", f"{STS}-1", NS)
    assert pod["status"]["containerStatuses"][0]["restartCount"] >= 1, pod["status"]


def test_training_finishes_with_done_and_summary_on_the_volume(deployed: dict, kube: Kube) -> None:
    [claim] = [c["metadata"]["name"] for c in kube.items("persistentvolumeclaim", NS)]
    volume = realnode.volume_dir(kube, NS, claim)

    def done() -> Path | None:
        return next(volume.rglob(contract.DONE_MARKER), None)

    marker = kube.wait_for(f"{contract.DONE_MARKER} on {volume}", done, 900, 2)
    log_figure("pulumi up start to DONE", time.monotonic() - deployed["started"])
    summary = json.loads((marker.parent / "summary.json").read_text())
    assert summary["workers"] == 2 and summary["final_step"] == TOTAL_STEPS, summary
    assert summary["accuracy"] >= 0.9, summary


def test_a_finished_run_stays_finished_through_refresh_and_continues_with_more_epochs(
    stack: Project, kube: Kube, deployed: dict
) -> None:
    kube.wait_for("no worker pod left", lambda: not kube.items("pods", NS, WORKERS), 300, 2)
    # The refresh reads spec.replicas 0 back: `up` must not bring the finished run's pods back.
    stack.refresh()
    stack.preview(expect_no_changes=True)
    stack.up()
    # The pods as the controller has them for the spec `up` left (not a sleep it may outlast).
    live = kube.observed_statefulset(STS, NS)
    assert live["spec"]["replicas"] == 0, live["spec"]
    assert not kube.items("pods", NS, WORKERS), "a refresh and an up revived the finished run"

    [claim] = [c["metadata"]["name"] for c in kube.items("persistentvolumeclaim", NS)]
    marker = next(realnode.volume_dir(kube, NS, claim).rglob(contract.DONE_MARKER))
    stack.set("epochs", EPOCHS + 1)
    started = time.monotonic()
    stack.up()

    def continued() -> dict | None:
        try:
            summary = json.loads((marker.parent / "summary.json").read_text())
        except (OSError, ValueError):  # being rewritten
            return None
        return summary if summary["final_step"] == TOTAL_STEPS + STEPS_PER_EPOCH else None

    summary = kube.wait_for("the continued run's DONE", continued, 600, 2)
    log_figure("continue a finished run: pulumi up to DONE", time.monotonic() - started)
    assert summary["workers"] == 2, summary
    kube.wait_for("no worker pod left again", lambda: not kube.items("pods", NS, WORKERS), 300, 2)


def test_destroy_leaves_nothing_running(stack: Project, kube: Kube, deployed: dict) -> None:
    started = time.monotonic()
    stack.destroy()
    kube.wait_for("namespace deleted", lambda: kube.get("namespace", NS) is None, 180)
    kube.wait_for("no container of the stack runs", lambda: not realnode.running_tasks(NS), 60)
    log_figure("pulumi destroy to nothing running", time.monotonic() - started)
    print(f"[real-node figures] {json.dumps(FIGURES)}")
