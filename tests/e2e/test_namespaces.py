"""A namespace the stack does not own, with the real engine and the released providers' create
semantics (docs/e2e.md): `up` into it fails and changes nothing; with ``namespaceMode:
existing`` the stack deploys into it and ``destroy`` leaves it and its other objects in place.

The tests run in order and share one namespace and one stack.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from pulumi import automation as auto

from tests.e2e.harness import KUBECONFIG, Kube, Project

NAMESPACE = "tfd-theirs"
STATEFULSET = "tfd-worker"
OWNER_LABELS = {"team": "vision", "kubernetes.io/metadata.name": NAMESPACE}


def owners_objects(kube: Kube) -> dict[str, Any]:
    """What the namespace's owner has in it: its labels, its pod and config map (by uid)."""
    return {
        "labels": kube.get("namespace", NAMESPACE)["metadata"].get("labels", {}),
        "pod": kube.get("pod", "their-job", NAMESPACE)["metadata"]["uid"],
        "configmap": kube.get("configmap", "their-settings", NAMESPACE)["metadata"]["uid"],
    }


@pytest.fixture(scope="module")
def theirs(kube: Kube) -> dict[str, Any]:
    """A namespace of another team, with a running pod and a config map in it."""
    kube.run("create", "namespace", NAMESPACE)
    kube.run("label", "namespace", NAMESPACE, "team=vision")
    kube.run("create", "configmap", "their-settings", "-n", NAMESPACE, "--from-literal=a=b")
    kube.run(
        "run", "their-job", "-n", NAMESPACE, "--image=registry.example/their/job:1",
        "--restart=Never",
    )  # fmt: skip
    kube.wait_for(
        "their pod running",
        lambda: (
            (kube.get("pod", "their-job", NAMESPACE).get("status") or {}).get("phase") == "Running"
        ),
    )
    before = owners_objects(kube)
    assert before["labels"] == OWNER_LABELS, before
    return before


@pytest.fixture(scope="module")
def project(new_project: Callable[..., Project]) -> Project:
    stack = new_project("theirs", stack_file="e2e")
    stack.set("kubeconfig", KUBECONFIG.read_text(), secret=True)
    stack.set_many({"namespace": NAMESPACE, "checkpointRetention": "Delete"})
    return stack


def test_up_into_a_namespace_it_does_not_own_fails_and_changes_nothing(
    theirs: dict[str, Any], project: Project, kube: Kube
) -> None:
    with pytest.raises(auto.CommandError) as failed:
        project.up()
    text = str(failed.value)
    assert f'namespaces "{NAMESPACE}" already exists' in text, text[-3000:]
    assert owners_objects(kube) == theirs, "the failed up changed the owner's namespace"
    for kind in ("statefulset.apps", "networkpolicy", "resourcequota", "role"):
        assert kube.items(kind, NAMESPACE) == [], f"the failed up left a {kind} in {NAMESPACE}"


def test_with_namespace_mode_existing_it_deploys_and_destroy_leaves_the_namespace(
    theirs: dict[str, Any], project: Project, kube: Kube
) -> None:
    project.set("namespaceMode", "existing")
    project.up()
    kube.wait_for("2 ready workers", lambda: kube.ready_replicas(STATEFULSET, NAMESPACE) == 2)
    # Never labelled over (no Pod Security labels), no quota on the owner's pods.
    assert owners_objects(kube) == theirs
    assert kube.items("resourcequota", NAMESPACE) == []
    # Its deny-all selects its own pods only: the owner's pod keeps its network.
    policies = {p["metadata"]["name"]: p for p in kube.items("networkpolicy", NAMESPACE)}
    assert policies, "no NetworkPolicy deployed"
    for name, policy in policies.items():
        selector = policy["spec"]["podSelector"]
        assert selector.get("matchLabels"), f"NetworkPolicy {name} selects every pod: {selector}"

    project.destroy()
    assert kube.get("statefulset.apps", STATEFULSET, NAMESPACE) is None
    assert kube.items("networkpolicy", NAMESPACE) == []
    assert owners_objects(kube) == theirs, "destroy changed or removed the owner's objects"
    kube.run("delete", "namespace", NAMESPACE, "--wait=false")
