"""The training namespace, its quota, the workers' ServiceAccount and their (minimal) RBAC.

The trainer calls the Kubernetes API for its own StatefulSet only (``contract.API_CALLS``):
``get`` it (live replica count, rollout revision), ``patch`` its ``scale`` subresource (to zero
when the run is done), and ``delete`` its own pod (a rollout restarts the workers together).
The Role grants exactly those verbs, each on the StatefulSet's name or its pods' names
(:mod:`infra.admission` keeps the scale patch at zero). The token is never automounted: the
StatefulSet projects a short-lived one (:mod:`infra.workers`).

``namespaceMode: create`` (the default) makes the namespace the stack's own: created with Pod
Security ``restricted`` labels and a ResourceQuota (:mod:`infra.quota`), deleted on
``pulumi destroy`` unless it holds a retained checkpoint claim. Released pulumi-kubernetes
providers (4.29 and later) create with a plain ``create``, so a namespace that already exists
fails ``pulumi up`` with ``AlreadyExists`` instead of being taken over; ``namespaceMode:
existing`` deploys into such a namespace without a Namespace resource (never labelled, never
deleted by the stack), or ``pulumi import`` adopts it (``docs/infra.md``).
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as kubernetes

from infra import workers
from infra.component import Component
from infra.config import StackConfig
from infra.labels import kwargs, metadata
from infra.quota import quota_manifest
from trainer import contract

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
    """One rule per call in ``contract.API_CALLS``, on the names the trainer may touch."""
    return contract.role_rules(cfg.statefulset_name, workers.max_replicas(cfg))


def role_manifest(cfg: StackConfig) -> dict:
    """The workers' Role: :func:`role_rules`."""
    return {"metadata": metadata(cfg, role_name(cfg), "worker"), "rules": role_rules(cfg)}


def role_name(cfg: StackConfig) -> str:
    return f"{cfg.app_name}-trainer"


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
    """Namespace and ResourceQuota (``namespaceMode: create`` only), ServiceAccount, Role and
    RoleBinding.

    With a retained checkpoint claim (:attr:`infra.config.StackConfig.retains_namespace`) the
    Namespace is ``retain_on_delete`` as well: deleting a namespace deletes every object in it,
    so ``pulumi destroy`` would otherwise delete the claim it was told to keep.

    Attributes:
        namespace_name: the namespace, as an output of the Namespace where the stack creates it
            (children depend on it), else the configured name.
        service_account_name: the workers' ServiceAccount name.
        role_rules: the Role's rules (what :mod:`infra.admission` guards).
    """

    namespace_name: pulumi.Output[str]
    service_account_name: pulumi.Output[str]

    def __init__(
        self, name: str, args: TrainingNamespaceArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(COMPONENT_TYPE, name, opts)
        cfg = args.cfg
        self.role_rules = role_rules(cfg)
        namespaced: list[pulumi.Resource] = []
        if cfg.owns_namespace:
            ns = kubernetes.core.v1.Namespace(
                name,
                **kwargs(namespace_manifest(cfg)),
                opts=self.child_opts(retain_on_delete=cfg.retains_namespace),
            )
            namespaced.append(ns)
            self.namespace_name = ns.metadata.apply(lambda m: m.name)
        else:
            self.namespace_name = pulumi.Output.from_input(cfg.namespace)
        in_ns = self.child_opts(depends_on=namespaced)
        quota = quota_manifest(cfg)
        if quota is not None:
            kubernetes.core.v1.ResourceQuota(f"{name}-quota", **kwargs(quota), opts=in_ns)
        sa = kubernetes.core.v1.ServiceAccount(
            f"{name}-worker", **kwargs(service_account_manifest(cfg)), opts=in_ns
        )
        role = kubernetes.rbac.v1.Role(f"{name}-trainer", **kwargs(role_manifest(cfg)), opts=in_ns)
        kubernetes.rbac.v1.RoleBinding(
            f"{name}-trainer",
            **kwargs(role_binding_manifest(cfg, role_name(cfg))),
            opts=self.child_opts(depends_on=[role, sa]),
        )
        self.service_account_name = sa.metadata.apply(lambda m: m.name)
        self.register_outputs(
            {"namespace": self.namespace_name, "service_account": self.service_account_name}
        )
