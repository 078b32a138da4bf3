"""The run's lifecycle on the real engine and control plane: the trainer's own API calls (made by
``trainer/k8s.py`` with the workers' ServiceAccount token), what the StatefulSet, HPA and Pulumi
then do. kwok runs no container, so the trainer's decision to call (done, rollout) is proved by
the trainer's own tests and by the real-node suite; here the calls themselves are real.

The tests of this module run in order and share one deployed stack (its own namespace).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e.harness import KUBECONFIG, PROJECT, Kube, Project
from tools.training_impact import Impact
from trainer import contract, k8s

NAMESPACE = "tfd-life"
STATEFULSET = "tfd-worker"
SERVICE_ACCOUNT = "tfd-worker"
STS_TYPE = "kubernetes:apps/v1:StatefulSet"
HPA_SYNC_S = 5  # tools/cluster.py: --horizontal-pod-autoscaler-sync-period


@pytest.fixture(scope="module")
def project(new_project: Callable[..., Project]) -> Project:
    stack = new_project("life", stack_file="e2e")
    stack.set("kubeconfig", KUBECONFIG.read_text(), secret=True)
    stack.set("namespace", NAMESPACE)
    return stack


@pytest.fixture(scope="module")
def deployed(project: Project, kube: Kube) -> Project:
    project.up()
    kube.wait_for("2 ready workers", lambda: kube.ready_replicas(STATEFULSET, NAMESPACE) == 2)
    return project


def make_worker_env(work: Path, kube: Kube, namespace: str) -> Callable[[str], dict]:
    """``make(pod)``: the API part of a worker's environment in ``namespace``, with a token of
    the workers' ServiceAccount (what the projected volume holds in a pod) and the cluster's CA."""
    cluster = json.loads(KUBECONFIG.read_text())["clusters"][0]["cluster"]
    (work / "ca.crt").write_bytes(base64.b64decode(cluster["certificate-authority-data"]))

    def make(pod: str) -> dict[str, str]:
        token = kube.run(
            "create", "token", SERVICE_ACCOUNT, "-n", namespace, "--duration=10m"
        ).strip()
        (work / "token").write_text(token)
        return {
            contract.ENV_API_URL: cluster["server"],
            contract.ENV_API_TOKEN_PATH: str(work / "token"),
            contract.ENV_API_CA_PATH: str(work / "ca.crt"),
            contract.ENV_NAMESPACE: namespace,
            contract.ENV_STATEFULSET: STATEFULSET,
            contract.ENV_POD_NAME: pod,
        }

    return make


@pytest.fixture(scope="module")
def worker_env(tmp_path_factory: pytest.TempPathFactory, kube: Kube) -> Callable[[str], dict]:
    return make_worker_env(tmp_path_factory.mktemp("worker-api"), kube, NAMESPACE)


def _pods(kube: Kube) -> list[dict]:
    return kube.items("pod", NAMESPACE, "app.kubernetes.io/instance=tfd")


@pytest.mark.parametrize(
    ("verb", "resource", "allowed"),
    [
        ("get", f"statefulsets.apps/{STATEFULSET}", True),
        ("patch", f"statefulsets.apps/{STATEFULSET}", False),
        ("update", f"statefulsets.apps/{STATEFULSET}", False),
        ("get", "statefulsets.apps/other", False),
        ("list", "statefulsets.apps", False),
        ("delete", f"pods/{STATEFULSET}-0", True),
        ("delete", f"pods/{STATEFULSET}-2", True),  # autoscalingMaxReplicas 3
        ("delete", f"pods/{STATEFULSET}-3", False),
        ("delete", "pods/other", False),
        ("get", f"pods/{STATEFULSET}-0", False),
        ("create", "pods", False),
        ("get", "secrets", False),
    ],
)
def test_workers_may_make_exactly_the_trainer_calls(
    deployed: Project, kube: Kube, verb: str, resource: str, allowed: bool
) -> None:
    who = f"--as=system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}"
    assert kube.can_i(verb, resource, "-n", NAMESPACE, who) is allowed, f"{verb} {resource}"
    scale = f"statefulsets.apps/{STATEFULSET}"
    assert kube.can_i("patch", scale, "--subresource=scale", "-n", NAMESPACE, who), "scale"


def test_done_scales_to_zero_and_stays_without_diff(
    deployed: Project, kube: Kube, worker_env: Callable[[str], dict]
) -> None:
    env = worker_env(f"{STATEFULSET}-0")
    # The workers may not patch the StatefulSet itself (test above): this call succeeding is
    # the scale subresource at work.
    assert k8s.scale_to_zero(env).endswith(f"/statefulsets/{STATEFULSET}/scale")
    kube.wait_for("no worker pods", lambda: _pods(kube) == [] or None)
    deployed.preview(expect_no_changes=True)
    # The HPA (min 2) must not bring a finished run back: wait out several of its syncs.
    kube.wait_for(
        "the HPA reports scaling disabled",
        lambda: any(
            c["type"] == "ScalingActive" and c["status"] == "False"
            and c["reason"] == "ScalingDisabled"
            for c in (kube.get("hpa", STATEFULSET, NAMESPACE).get("status") or {}).get(
                "conditions", []
            )
        ),
        timeout=24 * HPA_SYNC_S,  # ends at the sync that says so; a loaded machine syncs late
    )  # fmt: skip
    sts = kube.get("statefulset.apps", STATEFULSET, NAMESPACE)
    assert sts["spec"]["replicas"] == 0, "the HPA revived a finished run"
    assert _pods(kube) == []


def _resources(steps: list) -> set[tuple[str, str]]:
    """(operation, name) of changed steps, the size patch's digest cut off its name."""
    return {(s.op, s.name.split("-size-")[0]) for s in steps}


def test_a_refresh_of_the_finished_run_changes_nothing(deployed: Project, kube: Kube) -> None:
    # The refresh reads spec.replicas 0 back into the state: no reason to bring the pods back.
    deployed.refresh()
    deployed.preview(expect_no_changes=True)
    deployed.up()
    assert kube.get("statefulset.apps", STATEFULSET, NAMESPACE)["spec"]["replicas"] == 0
    assert _pods(kube) == []


def test_more_epochs_bring_the_finished_runs_workers_back(deployed: Project, kube: Kube) -> None:
    # The HPA does nothing for a target at zero: the new size patch brings the workers back.
    deployed.set("epochs", 7)
    changed = _resources(deployed.preview().changed())
    assert changed == {("update", "workers"), ("create", "workers"), ("delete", "workers")}, changed
    deployed.up()
    kube.wait_for("2 ready workers again", lambda: kube.ready_replicas(STATEFULSET, NAMESPACE) == 2)
    args = kube.get("statefulset.apps", STATEFULSET, NAMESPACE)["spec"]["template"]["spec"][
        "containers"
    ][0]["args"]
    assert args[args.index("--epochs") + 1] == "7", args
    deployed.preview(expect_no_changes=True)


def test_a_new_run_id_replaces_the_statefulset_at_full_size(deployed: Project, kube: Kube) -> None:
    deployed.set("runId", "2")
    preview = deployed.preview()
    assert preview.impact is Impact.NEW_RUN, preview.impact
    changed = _resources(preview.changed())
    assert changed and {name for _, name in changed} == {"workers"}, changed
    assert any(op in ("replace", "delete-replaced") for op, _ in changed), changed
    up = deployed.up()
    assert {name for _, name in _resources(up.changed())} == {"workers"}, up.changed()
    kube.wait_for("2 ready workers", lambda: kube.ready_replicas(STATEFULSET, NAMESPACE) == 2)
    sts = kube.get("statefulset.apps", STATEFULSET, NAMESPACE)
    assert sts["metadata"]["annotations"]["tf-distributed.io/run-id"] == "2"
    env = {
        e["name"]: e.get("value") for e in sts["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    # <claim mount>/<project>/<stack>/<runId>: unique per project, stack and run.
    assert env[contract.ENV_CHECKPOINT_DIR] == f"/checkpoints/{PROJECT}/{deployed.stack.name}/2"
    assert (env[contract.ENV_PROJECT], env[contract.ENV_STACK]) == (PROJECT, "life"), env
    deployed.preview(expect_no_changes=True)


def test_a_rollout_waits_for_the_workers_then_all_restart_once(
    deployed: Project, kube: Kube, worker_env: Callable[[str], dict]
) -> None:
    before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in _pods(kube)}
    assert len(before) == 2, before
    deployed.set("imageReference", "tf-distributed-trainer:0.2.0")
    up = deployed.up()
    assert [(s.op, s.name) for s in up.changed()] == [("update", "workers")]
    # The new template's revision: up returns before the controller has seen the new spec.
    sts = kube.observed_statefulset(STATEFULSET, NAMESPACE)
    new_revision = sts["status"]["updateRevision"]
    # OnDelete: the controller replaced nothing; every pod still runs the old template.
    pods = _pods(kube)
    assert {p["metadata"]["uid"] for p in pods} == set(before.values())
    assert all(p["metadata"]["labels"]["controller-revision-hash"] != new_revision for p in pods), (
        "a pod was replaced by the controller"
    )
    state = k8s.statefulset_state(worker_env(f"{STATEFULSET}-0"))
    assert state.update_revision == new_revision, state
    # What each worker does once all agreed to stop: delete its own pod.
    for name in before:
        k8s.delete_own_pod(worker_env(name))

    def all_new() -> bool:
        now = _pods(kube)
        return (
            len(now) == 2
            and all(p["metadata"]["uid"] not in before.values() for p in now)
            and all(
                p["metadata"]["labels"]["controller-revision-hash"] == new_revision for p in now
            )
            and kube.ready_replicas(STATEFULSET, NAMESPACE) == 2
        )

    kube.wait_for("both workers recreated from the new template", all_new)
    images = {p["spec"]["containers"][0]["image"] for p in _pods(kube)}
    assert images == {"tf-distributed-trainer:0.2.0"}, images
    deployed.preview(expect_no_changes=True)
