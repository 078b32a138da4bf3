"""The cloud example (``Pulumi.prod.yaml``) with the real engine, pointed at the local cluster.

A user follows the stack file: a kubeconfig whose context is ``tfd-prod`` (held here by the
stack as a secret, the by-hand way; CI supplies it as ``$KUBECONFIG``), the Grafana password as
a secret, preview, deploy. The test-only overrides point the stack at this cluster: the
kube-prometheus-stack chart cannot be downloaded here, and with no registry to push to the
workers run a prebuilt image by digest (``imageReference``), which cloud stacks require to be
pinned.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from pulumi import automation as auto

from tests.e2e.harness import Kube, Project, kubeconfig_with_context

NAMESPACE = "tfd-prod"
STATEFULSET = "tfd-worker"
SELECTOR = "app.kubernetes.io/name=tf-distributed,app.kubernetes.io/instance=tfd"
PREBUILT = "registry.example/tfd/tf-distributed-trainer@sha256:" + "5" * 64
TEST_ONLY_OVERRIDES = {"monitoringEnabled": False, "imageReference": PREBUILT}


def test_prod_example_deploys_its_gpu_workers_onto_the_gpu_node_only(
    new_project: Callable[..., Project], kube: Kube
) -> None:
    prod = new_project("prod")
    # Without a kube context and a kubeconfig: the program's own message.
    prod.set("kubeContext", "")
    with pytest.raises(auto.CommandError) as failed:
        prod.preview()
    assert (
        "tf-distributed:kubeContext: clusterKind 'cloud' needs a kube context and/or a secret "
        "kubeconfig" in str(failed.value)
    ), failed.value
    assert "Traceback" not in str(failed.value)

    # What Pulumi.prod.yaml tells its user: the cluster under the context tfd-prod.
    prod.set("kubeContext", "tfd-prod")
    prod.set("kubeconfig", kubeconfig_with_context("tfd-prod"), secret=True)
    prod.set("grafanaAdminPassword", "prod-e2e-grafana", secret=True)
    prod.set_many(TEST_ONLY_OVERRIDES)

    preview = prod.preview()
    assert {s.op for s in preview.steps if s.type != "pulumi:pulumi:Stack"} == {"create"}
    prod.up()
    kube.wait_for("4 ready GPU workers", lambda: kube.ready_replicas(STATEFULSET, NAMESPACE) == 4)
    pods = kube.items("pods", NAMESPACE, SELECTOR)
    assert len(pods) == 4, [p["metadata"]["name"] for p in pods]
    for pod in pods:
        name = pod["metadata"]["name"]
        assert pod["spec"]["nodeName"] == "tfd-gpu-0", f"pod {name} on {pod['spec']['nodeName']}"
        limits = pod["spec"]["containers"][0]["resources"]["limits"]
        assert limits.get("nvidia.com/gpu") == "1", f"pod {name}: limits {limits}"
        assert pod["spec"]["containers"][0]["image"] == PREBUILT

    # Replicas with autoscaling off: a new size patch sets the count (the StatefulSet's own
    # spec.replicas is set at creation only), the pod template's world size changes, and the
    # Role's pod names shrink with it (a worker may delete only its own pod); `up` applies all.
    prod.set("replicas", 2)
    changed = {s.name: s for s in prod.preview().changed()}
    assert sorted((s.op, s.type, s.name.split("-size-")[0]) for s in changed.values()) == [
        ("create", "kubernetes:apps/v1:StatefulSetPatch", "workers"),
        ("delete", "kubernetes:apps/v1:StatefulSetPatch", "workers"),
        ("update", "kubernetes:apps/v1:StatefulSet", "workers"),
        ("update", "kubernetes:core/v1:ResourceQuota", "training-quota"),
        ("update", "kubernetes:rbac.authorization.k8s.io/v1:Role", "training-trainer"),
    ], [(s.op, s.type, s.name, s.detailed_diff) for s in changed.values()]
    role_diff = changed["training-trainer"].detailed_diff
    assert set(role_diff) == {"rules[2].resourceNames[2]", "rules[2].resourceNames[3]"}, role_diff
    # The quota follows the worker count: every figure halves with it.
    quota_diff = changed["training-quota"].detailed_diff
    assert any(path.startswith("spec.hard") for path in quota_diff), quota_diff
    assert "spec.replicas" not in changed["workers"].detailed_diff, changed["workers"].detailed_diff
    prod.up()
    kube.wait_for("2 ready GPU workers", lambda: kube.ready_replicas(STATEFULSET, NAMESPACE) == 2)
    prod.preview(expect_no_changes=True)

    # Retain (the file's checkpointRetention): destroy keeps the namespace and the claim.
    prod.destroy()
    assert kube.get("persistentvolumeclaim", "tfd-checkpoints", NAMESPACE) is not None
    kube.run("delete", "namespace", NAMESPACE, "--wait=true", "--timeout=180s")
