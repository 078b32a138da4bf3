"""What bounds a worker's rights on the real control plane: the ValidatingAdmissionPolicy lets a
workers' ServiceAccount token scale its StatefulSet to zero only, and the namespace's
ResourceQuota refuses a worker beyond the stack's most workers.

The tests share one deployed stack in a namespace of their own (kept apart from the lifecycle
stack, whose previews must stay without changes).
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e.harness import KUBECONFIG, Kube, Project
from tests.e2e.test_lifecycle import STATEFULSET, make_worker_env
from trainer import contract, k8s

NAMESPACE = "tfd-bounds"


@pytest.fixture(scope="module")
def deployed(new_project: Callable[..., Project], kube: Kube) -> Project:
    stack = new_project("bounds", stack_file="e2e")
    stack.set("kubeconfig", KUBECONFIG.read_text(), secret=True)
    stack.set_many({"namespace": NAMESPACE, "checkpointRetention": "Delete"})
    stack.up()
    kube.wait_for("2 ready workers", lambda: kube.ready_replicas(STATEFULSET, NAMESPACE) == 2)
    return stack


@pytest.fixture(scope="module")
def worker_env(tmp_path_factory: pytest.TempPathFactory, kube: Kube) -> Callable[[str], dict]:
    return make_worker_env(tmp_path_factory.mktemp("bounds-api"), kube, NAMESPACE)


def _pods(kube: Kube) -> list[dict]:
    return kube.items("pod", NAMESPACE, "app.kubernetes.io/instance=tfd")


def _scale_as_worker(env: dict[str, str], replicas: int) -> tuple[int, str]:
    """PATCH the ``scale`` subresource the way the trainer does (``trainer/k8s.py``), with a
    workers' ServiceAccount token: (HTTP status, body)."""
    url = k8s.statefulset_url(env) + "/scale"
    request = urllib.request.Request(
        url,
        data=json.dumps({"spec": {"replicas": replicas}}).encode(),
        method="PATCH",
        headers={
            "Content-Type": k8s.MERGE_PATCH,
            "Authorization": f"Bearer {Path(env[contract.ENV_API_TOKEN_PATH]).read_text().strip()}",
        },
    )
    context = ssl.create_default_context(cafile=env[contract.ENV_API_CA_PATH])
    try:
        with urllib.request.urlopen(request, context=context, timeout=30) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_a_worker_token_cannot_scale_beyond_zero(
    deployed: Project, kube: Kube, worker_env: Callable[[str], dict]
) -> None:
    env = worker_env(f"{STATEFULSET}-0")
    for replicas in (5000, 3, 1):
        status, body = _scale_as_worker(env, replicas)
        assert status == 403, f"a worker token scaled to {replicas}: {status} {body}"
        # The ValidatingAdmissionPolicy's message, not RBAC's (the Role allows this patch).
        assert "may only scale StatefulSet" in body and f"got {replicas}" in body, body
    assert kube.get("statefulset.apps", STATEFULSET, NAMESPACE)["spec"]["replicas"] == 2


def test_the_quota_refuses_a_worker_beyond_the_most_workers(deployed: Project, kube: Kube) -> None:
    # As the deployer (not the workers): the count is allowed, the fourth pod is not.
    kube.run("scale", f"statefulset/{STATEFULSET}", "-n", NAMESPACE, "--replicas=4")

    def refused() -> str | None:
        for event in kube.items("events", NAMESPACE):
            if event.get("reason") == "FailedCreate" and "exceeded quota" in event["message"]:
                return event["message"]
        return None

    message = kube.wait_for("the quota refusing a fourth worker", refused, 60)
    assert f"{STATEFULSET}-3" in message, message
    kube.wait_for("3 ready workers", lambda: kube.ready_replicas(STATEFULSET, NAMESPACE) == 3)
    assert sorted(p["metadata"]["name"] for p in _pods(kube)) == [
        f"{STATEFULSET}-{i}" for i in range(3)
    ]
    kube.run("scale", f"statefulset/{STATEFULSET}", "-n", NAMESPACE, "--replicas=2")
    kube.wait_for("2 workers", lambda: len(_pods(kube)) == 2)
