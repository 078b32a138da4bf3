"""What the policies need to know about the stack under preview, read from its configuration.

The analyzer sees resource inputs, not the stack's configuration, so the few settings a policy
compares against (cluster kind, checkpoint retention, GPU settings) are read the way the CLI
reads them: ``Pulumi.yaml``'s ``config:`` defaults overlaid with ``Pulumi.<stack>.yaml`` from
the project directory (the analyzer's working directory), then the cloud's conventions where
``clusterKind`` names one and a key is still at its default, as the program fills them
(:mod:`infra.config.clouds`). The stack's name comes from a resource URN. Policy-pack config
(``--policy-pack-config``) can set any of them instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from infra.config.clouds import is_cloud, with_cloud_defaults

PROJECT = "tf-distributed"
DEFAULT_GPU_RESOURCE = "nvidia.com/gpu"


class FactsError(ValueError):
    """The project or stack file cannot be read as Pulumi configuration."""


@dataclass(frozen=True)
class StackFacts:
    """The configuration the policies compare resources against.

    Attributes:
        stack: stack name (from the URN), or ``""`` when unknown.
        cluster_kind: ``minikube``, ``cloud``, ``gke``, ``eks`` or ``aks``
            (``tf-distributed:clusterKind``).
        checkpoint_retention: ``Retain`` or ``Delete`` (``tf-distributed:checkpointRetention``).
        checkpoint_uri: the object-store checkpoint URI, ``""`` for the shared claim.
        gpu_resource: the extended resource name of GPUs (``tf-distributed:gpuResourceName``).
        gpu_taint_keys: taint keys GPU workloads must tolerate: the keys of
            ``tf-distributed:gpuTolerations`` (the cloud's, where the stack leaves it empty);
            none configured, none demanded (AKS adds no GPU taint).
        gpu_label_keys: node label keys GPU workloads must select (nodeSelector or required
            node affinity): the keys of ``tf-distributed:gpuNodeSelector`` (or the cloud's).
        namespace: the training namespace (``tf-distributed:namespace``).
        namespace_mode: ``create`` or ``existing`` (``tf-distributed:namespaceMode``): with
            ``existing`` the stack deploys into ``namespace`` without declaring it.
    """

    stack: str = ""
    cluster_kind: str = "minikube"
    checkpoint_retention: str = "Retain"
    checkpoint_uri: str = ""
    gpu_resource: str = DEFAULT_GPU_RESOURCE
    gpu_taint_keys: tuple[str, ...] = ()
    gpu_label_keys: tuple[str, ...] = ()
    namespace: str = ""
    namespace_mode: str = "create"

    @property
    def cloud(self) -> bool:
        """Every kind but minikube: images pulled from a registry, pinned by digest."""
        return is_cloud(self.cluster_kind)


def stack_of(urn: str) -> str:
    """``urn:pulumi:<stack>::<project>::<type>::<name>`` -> ``<stack>``."""
    head = urn.split("::", 1)[0]
    return head.split(":")[-1] if head.startswith("urn:pulumi:") else ""


_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
# (path, mtime_ns) -> config mapping: the analyzer asks once per resource and policy.
_CACHE: dict[tuple[str, int], dict[str, Any]] = {}


def _load(path: Path) -> dict[str, Any]:
    try:
        key = (str(path.resolve()), path.stat().st_mtime_ns)
    except OSError as exc:
        raise FactsError(f"{path}: cannot read it ({exc})") from exc
    if key not in _CACHE:
        _CACHE[key] = _parse(path)
    return _CACHE[key]


def _parse(path: Path) -> dict[str, Any]:
    try:
        doc = yaml.load(path.read_text(encoding="utf-8"), Loader=_Loader) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise FactsError(f"{path}: cannot read it as YAML ({exc})") from exc
    config = doc.get("config") or {}
    if not isinstance(config, dict):
        raise FactsError(f"{path}: 'config' must be a mapping")
    return config


def project_defaults(root: Path) -> dict[str, Any]:
    """The declared defaults of the project's keys (``Pulumi.yaml``), by short key."""
    values: dict[str, Any] = {}
    project = root / "Pulumi.yaml"
    if project.is_file():
        for key, spec in _load(project).items():
            short = key.split(":", 1)[1] if key.startswith(f"{PROJECT}:") else key
            if ":" not in short and isinstance(spec, dict) and "default" in spec:
                values[short] = spec["default"]
    return values


def read_config(root: Path, stack: str) -> dict[str, Any]:
    """The project-namespace config of ``stack`` by short key (defaults, then the stack file)."""
    values = project_defaults(root)
    stack_file = root / f"Pulumi.{stack}.yaml"
    if stack and stack_file.is_file():
        for key, value in _load(stack_file).items():
            if key.startswith(f"{PROJECT}:"):
                values[key.split(":", 1)[1]] = value
    return values


def facts_from_config(
    stack: str, config: Mapping[str, Any], declared: Mapping[str, Any] | None = None
) -> StackFacts:
    """:class:`StackFacts` from short config keys (missing keys keep the program's defaults);
    ``declared``: the project's declared defaults, which a cloud's conventions replace."""
    base = StackFacts(stack=stack)
    kind = str(config.get("clusterKind") or base.cluster_kind)
    config = with_cloud_defaults(kind, config, declared or {})
    gpu_resource = str(config.get("gpuResourceName") or base.gpu_resource)
    tolerations = config.get("gpuTolerations") or []
    keys = tuple(str(t).rsplit(":", 1)[0].split("=", 1)[0] for t in tolerations if t)
    labels = tuple(str(s).split("=", 1)[0] for s in config.get("gpuNodeSelector") or [] if s)
    return replace(
        base,
        cluster_kind=kind,
        checkpoint_retention=str(config.get("checkpointRetention") or base.checkpoint_retention),
        checkpoint_uri=str(config.get("checkpointUri") or ""),
        gpu_resource=gpu_resource,
        gpu_taint_keys=keys,
        gpu_label_keys=labels,
        namespace=str(config.get("namespace") or ""),
        namespace_mode=str(config.get("namespaceMode") or base.namespace_mode),
    )


def stack_facts(urn: str, policy_config: Mapping[str, Any], root: Path | None = None) -> StackFacts:
    """The facts for the stack of ``urn``: its config files under ``root`` (default: the working
    directory), overridden by the policy's own config (same short keys)."""
    stack = stack_of(urn)
    root = root or Path.cwd()
    config = read_config(root, stack)
    config.update({k: v for k, v in policy_config.items() if v is not None})
    return facts_from_config(stack, config, project_defaults(root))
