"""Violating variants of the rendered stacks: one change each, the policy it must fail and the
parts of the message that must name the resource and the fix.

Shared by the offline pack tests (``tests/policy/test_pack.py``) and the real-CLI policy tests
(``tests/e2e/test_policy.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tools.render import Registered

STACKS = ("dev", "prod", "e2e", "gke", "eks", "aks")
POLICIES = {
    "images-pinned",
    "containers-hardened",
    "gpu-scheduling",
    "rbac-least-privilege",
    "namespace-isolation",
    "hpa-target-declared",
    "checkpoint-retention",
}
UNKNOWN_STRING = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"
"""The policy SDK's sentinel for a string that is unknown during preview."""


def _is(resource: Registered, kind: str) -> bool:
    """``resource`` is an object of ``kind``: not a ``<Kind>Patch`` of one (the worker count's
    StatefulSetPatch carries ``kind: StatefulSet`` too)."""
    return resource.inputs.get("kind") == kind and not resource.type.endswith("Patch")


def one(resources: list[Registered], kind: str) -> dict[str, Any]:
    found = [r.inputs for r in resources if _is(r, kind)]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def registered(resources: list[Registered], kind: str) -> Registered:
    return next(r for r in resources if _is(r, kind))


def pod(resources: list[Registered]) -> dict[str, Any]:
    return one(resources, "StatefulSet")["spec"]["template"]["spec"]


def container(resources: list[Registered]) -> dict[str, Any]:
    return pod(resources)["containers"][0]


def _set(path: str, value: Any) -> Callable[[list[Registered]], None]:
    """A change to the worker container: ``a.b.c`` under it set to ``value`` (None deletes)."""

    def change(resources: list[Registered]) -> None:
        target = container(resources)
        *parents, last = path.split(".")
        for key in parents:
            target = target.setdefault(key, {})
        if value is None:
            target.pop(last, None)
        else:
            target[last] = value

    return change


def _drop_pod_run_as_non_root(resources: list[Registered]) -> None:
    pod(resources)["securityContext"].pop("runAsNonRoot")
    container(resources)["securityContext"].pop("runAsNonRoot")


def _gpu_request_only(resources: list[Registered]) -> None:
    res = container(resources)["resources"]
    res["requests"]["nvidia.com/gpu"] = res["limits"].pop("nvidia.com/gpu")


def _gpu_limit_without_toleration(resources: list[Registered]) -> None:
    container(resources)["resources"]["limits"]["nvidia.com/gpu"] = 1


def _no_tolerations(resources: list[Registered]) -> None:
    pod(resources).pop("tolerations")


def _no_node_placement(resources: list[Registered]) -> None:
    """The GPU pod with neither node selector, node affinity nor tolerations."""
    for field in ("nodeSelector", "affinity", "tolerations"):
        pod(resources).pop(field, None)


def _selects_other_nodes(resources: list[Registered]) -> None:
    """GPU workers aimed at nodes by a label that is not the cloud's GPU label."""
    spec = pod(resources)
    spec.pop("affinity", None)
    spec["nodeSelector"] = {"pool": "big"}


def _role(change: Callable[[dict[str, Any]], None]) -> Callable[[list[Registered]], None]:
    return lambda resources: change(one(resources, "Role")["rules"][0])


def _add(kind: str, api: str, manifest: dict[str, Any]) -> Callable[[list[Registered]], None]:
    def change(resources: list[Registered]) -> None:
        group_version = api if "/" in api else f"core/{api}"
        resources.append(
            Registered(
                f"kubernetes:{group_version}:{kind}",
                f"extra-{kind.lower()}",
                {"apiVersion": api, "kind": kind, **manifest},
                "",
            )
        )

    return change


def _binding_to_cluster_role(resources: list[Registered]) -> None:
    one(resources, "RoleBinding")["roleRef"] = {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "edit",
    }


def _psa_baseline(resources: list[Registered]) -> None:
    training = next(
        r.inputs
        for r in resources
        if r.inputs.get("kind") == "Namespace"
        and r.inputs["metadata"]["name"] == one(resources, "StatefulSet")["metadata"]["namespace"]
    )
    training["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] = "baseline"


def _without(kind: str, name_suffix: str = "") -> Callable[[list[Registered]], None]:
    def change(resources: list[Registered]) -> None:
        doomed = [
            r
            for r in resources
            if r.inputs.get("kind") == kind
            and r.inputs["metadata"]["name"].endswith(name_suffix)
            and (kind != "Namespace" or r.name == "training")
        ]
        assert doomed, f"no {kind} *{name_suffix} to remove"
        for r in doomed:
            resources.remove(r)

    return change


def _deny_with_egress(resources: list[Registered]) -> None:
    deny = next(
        r.inputs
        for r in resources
        if r.inputs.get("kind") == "NetworkPolicy"
        and r.inputs["metadata"]["name"].endswith("default-deny")
    )
    deny["spec"]["egress"] = [{}]


def _deny_selects_other_pods(resources: list[Registered]) -> None:
    """The stack in a namespace it does not own (no Namespace), its deny-all policy aimed at
    pods that are not the workers."""
    _without("Namespace")(resources)
    deny = next(
        r.inputs
        for r in resources
        if r.inputs.get("kind") == "NetworkPolicy"
        and r.inputs["metadata"]["name"].endswith("default-deny")
    )
    deny["spec"]["podSelector"] = {"matchLabels": {"app.kubernetes.io/instance": "other"}}


def _hpa_target(field: str, value: str) -> Callable[[list[Registered]], None]:
    return lambda resources: one(resources, "HorizontalPodAutoscaler")["spec"][
        "scaleTargetRef"
    ].__setitem__(field, value)


def _sts_retention(value: str) -> Callable[[list[Registered]], None]:
    """Per-pod claims (volumeClaimTemplates) whose retention policy is ``value``."""

    def change(resources: list[Registered]) -> None:
        spec = one(resources, "StatefulSet")["spec"]
        spec["volumeClaimTemplates"] = [
            {
                "metadata": {"name": "scratch"},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "1Gi"}},
                },
            }
        ]
        spec["persistentVolumeClaimRetentionPolicy"] = {"whenDeleted": value, "whenScaled": value}

    return change


def _claim_not_retained(resources: list[Registered]) -> None:
    claim = registered(resources, "PersistentVolumeClaim")
    resources[resources.index(claim)] = Registered(
        claim.type, claim.name, claim.inputs, claim.provider, retain_on_delete=False
    )


@dataclass(frozen=True)
class Variant:
    id: str
    stack: str
    change: Callable[[list[Registered]], None]
    policy: str
    expected: tuple[str, ...]
    config: Mapping[str, Any] | None = None
    offline_only: str = ""
    """Why the analyzer cannot see this violation (so only the offline tests run it)."""


VARIANTS = [
    # images-pinned
    Variant(
        "latest-tag",
        "dev",
        _set("image", "tf-distributed-trainer:latest"),
        "images-pinned",
        (
            "StatefulSet tfd-dev/tfd-worker container 'trainer'",
            "moving tag 'latest'",
            "fix: set a version tag",
        ),
    ),
    Variant(
        "no-tag",
        "e2e",
        _set("image", "registry.local:5000/trainer"),
        "images-pinned",
        ("StatefulSet tfd-e2e/tfd-worker", "has no tag", "fix:"),
    ),
    Variant(
        "cloud-without-digest",
        "prod",
        _set("image", "us-docker.pkg.dev/example-project/tfd/tf-distributed-trainer:0.1.0"),
        "images-pinned",
        (
            "StatefulSet tfd-prod/tfd-worker",
            "not pinned by digest",
            "fix: deploy registry/repo:tag@sha256:",
        ),
    ),
    Variant(
        "cloud-by-policy-config",
        "e2e",
        lambda r: None,
        "images-pinned",
        ("StatefulSet tfd-e2e/tfd-worker", "not pinned by digest"),
        config={"clusterKind": "cloud"},
    ),
    # containers-hardened
    Variant(
        "root",
        "dev",
        _drop_pod_run_as_non_root,
        "containers-hardened",
        (
            "StatefulSet tfd-dev/tfd-worker container 'trainer'",
            "may run as root",
            "fix: securityContext.runAsNonRoot: true",
        ),
    ),
    Variant(
        "uid-0",
        "dev",
        _set("securityContext.runAsUser", 0),
        "containers-hardened",
        ("runAsUser is 0", "fix: run as a UID >= 10000"),
    ),
    Variant(
        "privilege-escalation",
        "prod",
        _set("securityContext.allowPrivilegeEscalation", True),
        "containers-hardened",
        (
            "tfd-prod/tfd-worker",
            "allows privilege escalation",
            "fix: securityContext.allowPrivilegeEscalation: false",
        ),
    ),
    Variant(
        "privileged",
        "dev",
        _set("securityContext.privileged", True),
        "containers-hardened",
        ("is privileged", "fix:"),
    ),
    Variant(
        "writable-root",
        "e2e",
        _set("securityContext.readOnlyRootFilesystem", False),
        "containers-hardened",
        ("root filesystem is writable", "fix: securityContext.readOnlyRootFilesystem: true"),
    ),
    Variant(
        "capabilities-kept",
        "dev",
        _set("securityContext.capabilities", None),
        "containers-hardened",
        ("capabilities not dropped", "fix: capabilities.drop: [ALL]"),
    ),
    Variant(
        "no-limits",
        "dev",
        _set("resources.limits", None),
        "containers-hardened",
        ("no limits for cpu and memory", "fix: resources.limits.cpu/memory"),
    ),
    Variant(
        "no-memory-request",
        "prod",
        _set("resources.requests.memory", None),
        "containers-hardened",
        ("no requests for memory", "fix: resources.requests.memory"),
    ),
    # gpu-scheduling
    Variant(
        "gpu-request-without-limit",
        "prod",
        _gpu_request_only,
        "gpu-scheduling",
        (
            "StatefulSet tfd-prod/tfd-worker container 'trainer'",
            "requests nvidia.com/gpu without a limit",
            "fix: resources.limits['nvidia.com/gpu']",
        ),
    ),
    Variant(
        "gpu-without-toleration",
        "prod",
        _no_tolerations,
        "gpu-scheduling",
        (
            "StatefulSet tfd-prod/tfd-worker",
            "does not tolerate the GPU taint 'nvidia.com/gpu'",
            "fix: tf-distributed:gpuTolerations",
        ),
    ),
    Variant(
        "gpu-on-a-cpu-stack",
        "dev",
        _gpu_limit_without_toleration,
        "gpu-scheduling",
        ("tfd-dev/tfd-worker", "has no way onto a GPU node", "fix: tf-distributed:gpuNodeSelector"),
    ),
    # Each cloud's GPU pod stripped of its way onto GPU nodes: refused, AKS's untainted pools
    # included; the cloud's taint is demanded where its stack leaves gpuTolerations empty.
    Variant(
        "aks-gpu-without-selector",
        "aks",
        _no_node_placement,
        "gpu-scheduling",
        ("StatefulSet tfd-aks/tfd-worker", "has no way onto a GPU node"),
    ),
    Variant(
        "eks-gpu-without-affinity-or-toleration",
        "eks",
        _no_node_placement,
        "gpu-scheduling",
        ("StatefulSet tfd-eks/tfd-worker", "has no way onto a GPU node"),
    ),
    Variant(
        "gke-gpu-without-the-clouds-toleration",
        "gke",
        _no_tolerations,
        "gpu-scheduling",
        ("StatefulSet tfd-gke/tfd-worker", "does not tolerate the GPU taint 'nvidia.com/gpu'"),
    ),
    Variant(
        "gke-gpu-on-other-nodes",
        "gke",
        _selects_other_nodes,
        "gpu-scheduling",
        ("tfd-gke/tfd-worker", "does not select the GPU node label 'cloud.google.com/gke-"),
    ),
    # rbac-least-privilege
    Variant(
        "verb-wildcard",
        "dev",
        _role(lambda rule: rule.__setitem__("verbs", ["*"])),
        "rbac-least-privilege",
        ("Role tfd-dev/tfd-trainer rules[0].verbs", "wildcard", "fix: list the exact"),
    ),
    Variant(
        "secrets",
        "e2e",
        _role(lambda rule: rule.__setitem__("resources", ["secrets"])),
        "rbac-least-privilege",
        (
            "Role tfd-e2e/tfd-trainer rules[0]",
            "access to Secrets",
            "fix: remove 'secrets'",
        ),
    ),
    Variant(
        "cluster-role-binding",
        "dev",
        _add(
            "ClusterRoleBinding",
            "rbac.authorization.k8s.io/v1",
            {
                "metadata": {"name": "tfd-admin"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "cluster-admin",
                },
                "subjects": [
                    {"kind": "ServiceAccount", "name": "tfd-worker", "namespace": "tfd-dev"}
                ],
            },
        ),
        "rbac-least-privilege",
        ("ClusterRoleBinding tfd-admin", "cluster-wide", "fix: a namespaced Role"),
    ),
    Variant(
        "binding-to-cluster-role",
        "dev",
        _binding_to_cluster_role,
        "rbac-least-privilege",
        (
            "RoleBinding tfd-dev/tfd-trainer",
            "binds a ClusterRole",
            "fix: bind a namespaced Role",
        ),
    ),
    # namespace-isolation
    Variant(
        "psa-baseline",
        "dev",
        _psa_baseline,
        "namespace-isolation",
        (
            "namespace 'tfd-dev' (runs StatefulSet tfd-dev/tfd-worker)",
            "not enforced at 'restricted'",
            "fix: label the Namespace",
        ),
    ),
    Variant(
        "namespace-not-declared",
        "e2e",
        _without("Namespace"),
        "namespace-isolation",
        ("namespace 'tfd-e2e'", "not declared by the stack", "fix: declare the Namespace"),
    ),
    Variant(
        "no-default-deny",
        "prod",
        _without("NetworkPolicy", "default-deny"),
        "namespace-isolation",
        (
            "namespace 'tfd-prod'",
            "no default-deny NetworkPolicy",
            "fix: a NetworkPolicy with podSelector {}",
        ),
    ),
    Variant(
        "existing-namespace-deny-misses-the-workers",
        "dev",
        _deny_selects_other_pods,
        "namespace-isolation",
        (
            "namespace 'tfd-dev' (runs StatefulSet tfd-dev/tfd-worker)",
            "no default-deny NetworkPolicy",
            "or the workload's own labels",
        ),
        config={"namespaceMode": "existing"},
    ),
    Variant(
        "default-deny-allows-egress",
        "dev",
        _deny_with_egress,
        "namespace-isolation",
        ("namespace 'tfd-dev'", "no default-deny NetworkPolicy"),
    ),
    # hpa-target-declared
    Variant(
        "hpa-other-name",
        "dev",
        _hpa_target("name", "tfd-trainer"),
        "hpa-target-declared",
        (
            "HorizontalPodAutoscaler tfd-dev/tfd-worker",
            "scales StatefulSet 'tfd-trainer'",
            "fix: point scaleTargetRef at the worker StatefulSet",
        ),
    ),
    Variant(
        "hpa-other-kind",
        "e2e",
        _hpa_target("kind", "Deployment"),
        "hpa-target-declared",
        ("HorizontalPodAutoscaler tfd-e2e/tfd-worker", "scales Deployment 'tfd-worker'"),
    ),
    # checkpoint-retention
    Variant(
        "sts-retains-on-a-delete-stack",
        "dev",
        _sts_retention("Retain"),
        "checkpoint-retention",
        (
            "StatefulSet tfd-dev/tfd-worker",
            "whenDeleted is 'Retain', config says 'Delete'",
            "fix: set it to tf-distributed:checkpointRetention",
        ),
    ),
    Variant(
        "claim-not-retained",
        "prod",
        _claim_not_retained,
        "checkpoint-retention",
        (
            "PersistentVolumeClaim tfd-prod/tfd-checkpoints",
            "retain_on_delete is False, config says Retain",
            "fix: retain_on_delete=True",
        ),
        offline_only="resource options reach analyzers without retain_on_delete",
    ),
    Variant(
        "claim-not-declared",
        "e2e",
        _without("PersistentVolumeClaim"),
        "checkpoint-retention",
        (
            "StatefulSet tfd-e2e/tfd-worker",
            "which the stack does not declare",
            "fix: declare the claim",
        ),
    ),
    Variant(
        "config-says-delete",
        "prod",
        lambda r: None,
        "checkpoint-retention",
        ("PersistentVolumeClaim tfd-prod/tfd-checkpoints", "config says Delete"),
        config={"checkpointRetention": "Delete"},
        offline_only="the analyzer does not see retain_on_delete, and the StatefulSet has no "
        "claim templates whose retention policy could disagree",
    ),
]


def _unknown_image(resources: list[Registered]) -> None:
    container(resources)["image"] = UNKNOWN_STRING


UNKNOWN_IMAGE = Variant("unknown-image", "prod", _unknown_image, "images-pinned", ())
