"""The training namespace, the workers' ServiceAccount and their (minimal) RBAC.

The trainer calls the Kubernetes API for one thing only: with autoscaling on
(``TFD_REPLICAS_SOURCE=api``) it GETs its own StatefulSet to learn the live replica count. So
the Role grants exactly ``get`` on that one StatefulSet, and exists only then. The token is
never automounted: the StatefulSet projects a short-lived one (see :mod:`infra.workers`).
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as kubernetes

from infra.component import Component
from infra.config import StackConfig
from infra.labels import kwargs, metadata

COMPONENT_TYPE = "tfd:infra:TrainingNamespace"
PSA_LEVEL = "restricted"
PSA_VERSION = "latest"


def namespace_manifest(cfg: StackConfig) -> dict:
    """Namespace with Pod Security Admission ``restricted`` enforced (and audited, warned)."""
    meta = metadata(cfg, cfg.namespace, "namespace", namespaced=False)
    for mode in ("enforce", "audit", "warn"):
        meta["labels"][f"pod-security.kubernetes.io/{mode}"] = PSA_LEVEL
        meta["labels"][f"pod-security.kubernetes.io/{mode}-version"] = PSA_VERSION
    return {"metadata": meta}


def service_account_manifest(cfg: StackConfig) -> dict:
    """The workers' dedicated ServiceAccount; no token is automounted from it."""
    return {
        "metadata": metadata(cfg, cfg.service_account_name, "worker"),
        "automountServiceAccountToken": False,
    }


def role_rules(cfg: StackConfig) -> list[dict]:
    """What the trainer calls: ``get`` on its own StatefulSet, only with autoscaling on."""
    if not cfg.autoscaling.enabled:
        return []
    return [
        {
            "apiGroups": ["apps"],
            "resources": ["statefulsets"],
            "resourceNames": [cfg.statefulset_name],
            "verbs": ["get"],
        }
    ]


def role_manifest(cfg: StackConfig) -> dict | None:
    """The workers' Role, or ``None`` when the trainer calls no API (autoscaling off)."""
    rules = role_rules(cfg)
    if not rules:
        return None
    return {"metadata": metadata(cfg, f"{cfg.app_name}-read-statefulset", "worker"), "rules": rules}


def role_binding_manifest(cfg: StackConfig, role_name: str) -> dict:
    """Binds the Role named ``role_name`` to the workers' ServiceAccount (same name)."""
    return {
        "metadata": metadata(cfg, role_name, "worker"),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role_name},
        "subjects": [
            {"kind": "ServiceAccount", "name": cfg.service_account_name, "namespace": cfg.namespace}
        ],
    }


@dataclass(frozen=True)
class TrainingNamespaceArgs:
    cfg: StackConfig


class TrainingNamespace(Component):
    """Namespace, ServiceAccount and (with autoscaling) Role + RoleBinding.

    With a retained checkpoint claim (:attr:`infra.config.StackConfig.retains_checkpoint_claim`)
    the Namespace is ``retain_on_delete`` as well: deleting a namespace deletes every object in
    it, so ``pulumi destroy`` would otherwise delete the claim it was told to keep.

    Attributes:
        namespace_name: the namespace, as an output of the Namespace (children depend on it).
        service_account_name: the workers' ServiceAccount name.
    """

    namespace_name: pulumi.Output[str]
    service_account_name: pulumi.Output[str]

    def __init__(
        self, name: str, args: TrainingNamespaceArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(COMPONENT_TYPE, name, opts)
        cfg = args.cfg
        ns = kubernetes.core.v1.Namespace(
            name,
            **kwargs(namespace_manifest(cfg)),
            opts=self.child_opts(retain_on_delete=cfg.retains_checkpoint_claim),
        )
        in_ns = self.child_opts(depends_on=[ns])
        sa = kubernetes.core.v1.ServiceAccount(
            f"{name}-worker", **kwargs(service_account_manifest(cfg)), opts=in_ns
        )
        role = role_manifest(cfg)
        if role is not None:
            created = kubernetes.rbac.v1.Role(
                f"{name}-read-statefulset", **kwargs(role), opts=in_ns
            )
            kubernetes.rbac.v1.RoleBinding(
                f"{name}-read-statefulset",
                **kwargs(role_binding_manifest(cfg, role["metadata"]["name"])),
                opts=self.child_opts(depends_on=[created, sa]),
            )
        self.namespace_name = ns.metadata.apply(lambda m: m.name)
        self.service_account_name = sa.metadata.apply(lambda m: m.name)
        self.register_outputs(
            {"namespace": self.namespace_name, "service_account": self.service_account_name}
        )
