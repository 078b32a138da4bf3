"""The rules of the policy pack as pure functions over resource inputs.

Each check takes what the analyzer hands a policy (a type token and the resource's inputs, the
Kubernetes manifest in its API spelling) and returns the violations as messages of the form
``<Kind> <namespace>/<name> ...: <what is wrong>; fix: <what to change>``. The functions only
read the inputs (through the policy SDK's unknown-checking proxies at preview, so a value that
is unknown until ``pulumi up`` raises the SDK's own ``UnknownValueError``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from policy.facts import StackFacts

# Pod-template workloads: kind -> path to the pod spec.
POD_SPEC_PATHS: dict[str, tuple[str, ...]] = {
    "Pod": ("spec",),
    "Deployment": ("spec", "template", "spec"),
    "StatefulSet": ("spec", "template", "spec"),
    "DaemonSet": ("spec", "template", "spec"),
    "ReplicaSet": ("spec", "template", "spec"),
    "ReplicationController": ("spec", "template", "spec"),
    "Job": ("spec", "template", "spec"),
    "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
}
RBAC_ROLE_KINDS = ("Role", "ClusterRole")
PSA_ENFORCE_LABEL = "pod-security.kubernetes.io/enforce"
PSA_LEVEL = "restricted"
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")


@dataclass(frozen=True)
class Resource:
    """One resource as a stack policy sees it.

    Attributes:
        type: Pulumi type token, e.g. ``kubernetes:apps/v1:StatefulSet``.
        props: the resource's inputs.
        name: Pulumi logical name.
        retain_on_delete: the ``retain_on_delete`` option where known; ``None`` under the
            analyzer, whose resource options do not carry it.
    """

    type: str
    props: Mapping[str, Any]
    name: str = ""
    retain_on_delete: bool | None = None

    @property
    def kind(self) -> str:
        return kind_of(self.type)


def kind_of(type_token: str) -> str:
    """``kubernetes:apps/v1:StatefulSet`` -> ``StatefulSet``; ``""`` for non-Kubernetes types."""
    return type_token.rsplit(":", 1)[-1] if type_token.startswith("kubernetes:") else ""


def _get(value: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(value, Mapping) or key not in value:
            return None
        value = value[key]
    return value


def _items(value: Any) -> list[Any]:
    """A list-valued field (``None`` and non-lists as empty)."""
    if isinstance(value, Sequence) and not isinstance(value, str):
        return list(value)
    return []


def namespace_of(props: Mapping[str, Any]) -> str:
    return str(_get(props, "metadata", "namespace") or "default")


def describe(kind: str, props: Mapping[str, Any]) -> str:
    """``Kind namespace/name`` (cluster-scoped: ``Kind name``)."""
    name = _get(props, "metadata", "name") or "<unnamed>"
    namespace = _get(props, "metadata", "namespace")
    return f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"


def pod_spec(kind: str, props: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The pod spec of a workload, ``None`` for anything else."""
    path = POD_SPEC_PATHS.get(kind)
    return None if path is None else (_get(props, *path) or {})


def containers(spec: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """``(label, container)`` for every init and regular container of a pod spec."""
    out = []
    for field, label in (("initContainers", "init container"), ("containers", "container")):
        for c in _items(spec.get(field)):
            out.append((f"{label} '{_get(c, 'name')}'", c))
    return out


# --- images ---


def image_problem(image: str, cloud: bool) -> str | None:
    """Why ``image`` is not pinned enough, or ``None``."""
    if not image:
        return "has no image"
    digest = DIGEST.search(image)
    name = image[: digest.start()] if digest else image
    last = name.rsplit("/", 1)[-1]
    tag = last.split(":", 1)[1] if ":" in last else ""
    if tag == "latest":
        return f"image '{image}' uses the moving tag 'latest'"
    if not tag and not digest:
        return f"image '{image}' has no tag (that means 'latest')"
    if cloud and not digest:
        return f"image '{image}' is not pinned by digest on a cloud stack"
    return None


def check_images(kind: str, props: Mapping[str, Any], facts: StackFacts) -> list[str]:
    spec = pod_spec(kind, props)
    if spec is None:
        return []
    cloud = facts.cloud
    out = []
    for label, c in containers(spec):
        problem = image_problem(str(_get(c, "image") or ""), cloud)
        if problem:
            fix = (
                "deploy registry/repo:tag@sha256:<digest> (a stack build pushes and pins it; "
                "tf-distributed:imageReference takes a CI-built one)"
                if cloud
                else "set a version tag (tf-distributed:imageTag, or a tagged imageReference)"
            )
            out.append(f"{describe(kind, props)} {label}: {problem}; fix: {fix}")
    return out


# --- container hardening ---


def check_container_security(kind: str, props: Mapping[str, Any]) -> list[str]:
    spec = pod_spec(kind, props)
    if spec is None:
        return []
    pod_ctx = spec.get("securityContext") or {}
    out = []
    for label, c in containers(spec):
        ctx = c.get("securityContext") or {}
        where = f"{describe(kind, props)} {label}"
        non_root = ctx.get("runAsNonRoot", pod_ctx.get("runAsNonRoot"))
        user = ctx.get("runAsUser", pod_ctx.get("runAsUser"))
        if non_root is not True:
            out.append(f"{where}: may run as root; fix: securityContext.runAsNonRoot: true")
        if user is not None and int(user) == 0:
            out.append(f"{where}: runAsUser is 0 (root); fix: run as a UID >= 10000")
        if ctx.get("privileged") is True:
            out.append(f"{where}: is privileged; fix: securityContext.privileged: false")
        if ctx.get("allowPrivilegeEscalation") is not False:
            out.append(
                f"{where}: allows privilege escalation; "
                "fix: securityContext.allowPrivilegeEscalation: false"
            )
        if ctx.get("readOnlyRootFilesystem") is not True:
            out.append(
                f"{where}: root filesystem is writable; fix: securityContext."
                "readOnlyRootFilesystem: true (mount an emptyDir where it must write)"
            )
        dropped = [str(d) for d in _items(_get(ctx, "capabilities", "drop"))]
        if "ALL" not in dropped:
            out.append(f"{where}: capabilities not dropped; fix: capabilities.drop: [ALL]")
        resources = c.get("resources") or {}
        for part in ("requests", "limits"):
            got = resources.get(part) or {}
            missing = [r for r in ("cpu", "memory") if r not in got]
            if missing:
                out.append(
                    f"{where}: no {part} for {' and '.join(missing)}; "
                    f"fix: resources.{part}.{'/'.join(missing)} (tf-distributed:cpu*/memory*)"
                )
    return out


# --- GPUs ---


def _gpu_names(resources: Mapping[str, Any], facts: StackFacts) -> set[str]:
    names = set()
    for part in ("requests", "limits"):
        for name in resources.get(part) or {}:
            if name == facts.gpu_resource or str(name).endswith("/gpu"):
                names.add(str(name))
    return names


def check_gpu(kind: str, props: Mapping[str, Any], facts: StackFacts) -> list[str]:
    spec = pod_spec(kind, props)
    if spec is None:
        return []
    out = []
    uses_gpu = False
    for label, c in containers(spec):
        resources = c.get("resources") or {}
        limits = resources.get("limits") or {}
        for name in sorted(_gpu_names(resources, facts)):
            uses_gpu = True
            if name not in limits:
                out.append(
                    f"{describe(kind, props)} {label}: requests {name} without a limit; "
                    f"fix: resources.limits['{name}'] (tf-distributed:gpusPerWorker)"
                )
    if uses_gpu:
        out += [f"{describe(kind, props)}: {why}" for why in _gpu_placement_problems(spec, facts)]
    return out


def _selected_labels(spec: Mapping[str, Any]) -> tuple[bool, set[str]]:
    """Whether a pod spec constrains its nodes at all (``nodeSelector`` or required node
    affinity), and the node label keys it requires: the ``nodeSelector`` keys and those its
    required node affinity matches with ``In`` or ``Exists`` in every term (the terms are
    alternatives: a key in some of them is no requirement)."""
    keys = {str(k) for k in (spec.get("nodeSelector") or {})}
    terms = _items(
        _get(
            spec,
            "affinity",
            "nodeAffinity",
            "requiredDuringSchedulingIgnoredDuringExecution",
            "nodeSelectorTerms",
        )
    )
    per_term = [
        {
            str(_get(e, "key"))
            for e in _items(_get(t, "matchExpressions"))
            if _get(e, "operator") in ("In", "Exists")
        }
        for t in terms
    ]
    constrained = bool(keys) or any(per_term)
    return constrained, keys | (set.intersection(*per_term) if per_term else set())


def _gpu_placement_problems(spec: Mapping[str, Any], facts: StackFacts) -> list[str]:
    """A GPU pod has a way onto a GPU node: it selects GPU nodes by label (the configured or
    the cloud's keys, else any) and tolerates the configured or the cloud's GPU taints. No
    taint is demanded that nothing configures: AKS, for one, taints no GPU pool."""
    out = []
    constrained, selected = _selected_labels(spec)
    if not constrained:
        out.append(
            "uses GPUs but has no way onto a GPU node (no nodeSelector or required node "
            "affinity); fix: tf-distributed:gpuNodeSelector (the GPU nodes' label, "
            "e.g. 'kubernetes.azure.com/accelerator=nvidia'), or a clusterKind naming the cloud"
        )
    for key in facts.gpu_label_keys:
        if constrained and key not in selected:
            out.append(
                f"uses GPUs but does not select the GPU node label '{key}'; "
                "fix: tf-distributed:gpuNodeSelector"
            )
    tolerations = _items(spec.get("tolerations"))
    tolerated = {str(_get(t, "key")) for t in tolerations}
    if any(_get(t, "operator") == "Exists" and not _get(t, "key") for t in tolerations):
        return out  # tolerates every taint
    for key in facts.gpu_taint_keys:
        if key not in tolerated:
            out.append(
                f"uses GPUs but does not tolerate the GPU taint '{key}'; "
                f"fix: tf-distributed:gpuTolerations, e.g. '{key}:NoSchedule'"
            )
    return out


# --- RBAC ---


def check_rbac(kind: str, props: Mapping[str, Any]) -> list[str]:
    where = describe(kind, props)
    if kind == "ClusterRoleBinding":
        return [
            f"{where}: grants cluster-wide access; fix: a namespaced Role and RoleBinding in the "
            "training namespace"
        ]
    if kind == "RoleBinding":
        ref = _get(props, "roleRef", "kind")
        if ref != "Role":
            return [
                f"{where}: binds a {ref} (rules this pack cannot see, often wildcards or "
                "Secrets); fix: bind a namespaced Role declared in the stack"
            ]
        return []
    if kind not in RBAC_ROLE_KINDS:
        return []
    out = []
    for i, rule in enumerate(_items(props.get("rules"))):
        for field in ("apiGroups", "resources", "verbs", "resourceNames", "nonResourceURLs"):
            values = [str(v) for v in _items(_get(rule, field))]
            if any("*" in v for v in values):
                out.append(
                    f"{where} rules[{i}].{field}: wildcard {values}; "
                    "fix: list the exact groups, resources and verbs the trainer uses"
                )
        resources = [str(v).split("/", 1)[0] for v in _items(_get(rule, "resources"))]
        if "secrets" in resources:
            out.append(
                f"{where} rules[{i}]: grants access to Secrets; fix: remove 'secrets' (the "
                "trainer reads only its StatefulSet)"
            )
    return out


# --- stack-wide rules ---


def workloads(resources: Iterable[Resource]) -> list[Resource]:
    return [r for r in resources if r.kind in POD_SPEC_PATHS]


def _default_deny(props: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The ``matchLabels`` a deny-all NetworkPolicy selects (``{}``: every pod), or ``None``
    when ``props`` is no deny-all policy: both policy types, no allow rules, no expressions."""
    spec = props.get("spec") or {}
    selector = spec.get("podSelector") or {}
    types = {str(t) for t in _items(spec.get("policyTypes"))}
    if (
        selector.get("matchExpressions")
        or not {"Ingress", "Egress"} <= types
        or _items(spec.get("ingress"))
        or _items(spec.get("egress"))
    ):
        return None
    return selector.get("matchLabels") or {}


def _pod_labels(kind: str, props: Mapping[str, Any]) -> Mapping[str, Any]:
    """The labels of a workload's pods: its template's (a Pod's own)."""
    return _get(props, *POD_SPEC_PATHS[kind][:-1], "metadata", "labels") or {}


def _covers(selected: Mapping[str, Any], labels: Mapping[str, Any]) -> bool:
    return all(labels.get(k) == v for k, v in selected.items())


def check_namespace_isolation(
    resources: Sequence[Resource], facts: StackFacts | None = None
) -> list[str]:
    """Every namespace running a workload of the stack: declared by the stack with Pod Security
    ``restricted`` enforced (unless it is the existing namespace ``namespaceMode: existing``
    names: its labels are its owner's), and a deny-all NetworkPolicy selecting the workload's
    pods (every pod, or the workload's own labels)."""
    facts = facts or StackFacts()
    namespaces = {
        str(_get(r.props, "metadata", "name")): r for r in resources if r.kind == "Namespace"
    }
    denials = [
        (namespace_of(r.props), selected)
        for r in resources
        if r.kind == "NetworkPolicy" and (selected := _default_deny(r.props)) is not None
    ]
    out = []
    for w in workloads(resources):
        ns = namespace_of(w.props)
        runs = f"namespace '{ns}' (runs {describe(w.kind, w.props)})"
        declared = namespaces.get(ns)
        existing = facts.namespace_mode == "existing" and ns == facts.namespace
        if declared is None and not existing:
            out.append(
                f"{runs}: not declared by the stack, so its Pod Security level is unknown; "
                f"fix: declare the Namespace with label {PSA_ENFORCE_LABEL}: {PSA_LEVEL} (or "
                "set tf-distributed:namespaceMode existing for a namespace someone else owns)"
            )
        elif (
            declared is not None
            and _get(declared.props, "metadata", "labels", PSA_ENFORCE_LABEL) != PSA_LEVEL
        ):
            out.append(
                f"{runs}: Pod Security is not enforced at '{PSA_LEVEL}'; "
                f"fix: label the Namespace {PSA_ENFORCE_LABEL}: {PSA_LEVEL}"
            )
        labels = _pod_labels(w.kind, w.props)
        if not any(d_ns == ns and _covers(sel, labels) for d_ns, sel in denials):
            out.append(
                f"{runs}: no default-deny NetworkPolicy; fix: a NetworkPolicy with podSelector "
                "{} (or the workload's own labels), policyTypes [Ingress, Egress] and no rules, "
                "then allow-rules beside it"
            )
    return out


def _group(api_version: str) -> str:
    return api_version.split("/", 1)[0] if "/" in api_version else ""


def check_hpa_targets(resources: Sequence[Resource]) -> list[str]:
    """Every HorizontalPodAutoscaler scales a workload the stack declares, in its namespace."""
    declared = {
        (
            namespace_of(w.props),
            _group(str(w.props.get("apiVersion") or w.type.split(":")[1].rsplit("/", 1)[0])),
            w.kind,
            str(_get(w.props, "metadata", "name")),
        )
        for w in workloads(resources)
    }
    out = []
    for hpa in (r for r in resources if r.kind == "HorizontalPodAutoscaler"):
        ref = _get(hpa.props, "spec", "scaleTargetRef") or {}
        target = (
            namespace_of(hpa.props),
            _group(str(ref.get("apiVersion") or "")),
            str(ref.get("kind")),
            str(ref.get("name")),
        )
        if target not in declared:
            out.append(
                f"{describe('HorizontalPodAutoscaler', hpa.props)}: scales {target[2]} "
                f"'{target[3]}' ({ref.get('apiVersion')}), which the stack does not declare in "
                f"namespace '{target[0]}'; fix: point scaleTargetRef at the worker StatefulSet"
            )
    return out


def check_checkpoint_retention(resources: Sequence[Resource], facts: StackFacts) -> list[str]:
    """Checkpoint storage is kept or deleted exactly as ``checkpointRetention`` says.

    - a StatefulSet with ``volumeClaimTemplates`` has the configured
      ``persistentVolumeClaimRetentionPolicy`` (without templates the field governs nothing);
    - without ``checkpointUri``: the workers mount a claim the stack declares, and where the
      ``retain_on_delete`` option is known, the claim and its namespace carry it exactly when
      the policy is ``Retain`` (deleting a namespace deletes the claims in it).
    """
    want = facts.checkpoint_retention
    keep = want == "Retain"
    out = []
    claims = {
        (namespace_of(r.props), str(_get(r.props, "metadata", "name"))): r
        for r in resources
        if r.kind == "PersistentVolumeClaim"
    }
    namespaces = {
        str(_get(r.props, "metadata", "name")): r for r in resources if r.kind == "Namespace"
    }
    for w in workloads(resources):
        where = describe(w.kind, w.props)
        if w.kind == "StatefulSet" and _items(_get(w.props, "spec", "volumeClaimTemplates")):
            policy = _get(w.props, "spec", "persistentVolumeClaimRetentionPolicy") or {}
            for when in ("whenDeleted", "whenScaled"):
                if policy.get(when) != want:
                    out.append(
                        f"{where}: persistentVolumeClaimRetentionPolicy.{when} is "
                        f"{policy.get(when)!r}, config says {want!r}; fix: set it to "
                        f"tf-distributed:checkpointRetention"
                    )
        if facts.checkpoint_uri:
            continue
        spec = pod_spec(w.kind, w.props) or {}
        mounted = [
            str(_get(v, "persistentVolumeClaim", "claimName"))
            for v in _items(spec.get("volumes"))
            if _get(v, "persistentVolumeClaim", "claimName")
        ]
        ns = namespace_of(w.props)
        if not mounted:
            out.append(
                f"{where}: no checkpoint claim mounted and no tf-distributed:checkpointUri; "
                "fix: mount the shared ReadWriteMany claim or set checkpointUri"
            )
        for claim_name in mounted:
            claim = claims.get((ns, claim_name))
            if claim is None:
                out.append(
                    f"{where}: mounts claim '{claim_name}', which the stack does not declare, "
                    f"so its retention cannot follow config ({want}); fix: declare the claim "
                    "in the stack"
                )
                continue
            holders = [claim] + ([namespaces[ns]] if ns in namespaces else [])
            for holder in holders:
                if holder.retain_on_delete is not None and holder.retain_on_delete != keep:
                    out.append(
                        f"{describe(holder.kind, holder.props)}: retain_on_delete is "
                        f"{holder.retain_on_delete}, config says {want}; fix: "
                        f"retain_on_delete={keep} (claim and namespace together)"
                    )
    return out
