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

from collections.abc import Mapping
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from infra import workers
from infra.component import Component
from infra.config import StackConfig
from infra.labels import Identity, metadata
from infra.quota import quota_hard, quota_name
from trainer import contract

COMPONENT_TYPE = "tfd:infra:TrainingNamespace"
PSA_LEVEL = "restricted"
PSA_VERSION = "latest"


@dataclass(frozen=True)
class TrainingNamespaceArgs:
    """Inputs of :class:`TrainingNamespace`.

    Attributes:
        identity: labels of every object and the namespace's name.
        own_namespace: ``namespaceMode: create``: the stack creates the Namespace and its quota.
        retain_namespace: the Namespace outlives ``pulumi destroy`` (a retained claim is in it).
        quota_hard: the ResourceQuota's ``spec.hard`` (:func:`infra.quota.quota_hard`).
        service_account_name: the workers' ServiceAccount (and the RoleBinding's subject).
        statefulset_name, max_replicas: the StatefulSet whose objects the Role names.
    """

    identity: Identity
    own_namespace: bool
    retain_namespace: bool
    quota_hard: Mapping[str, str]
    service_account_name: str
    statefulset_name: str
    max_replicas: int

    @classmethod
    def from_config(cls, cfg: StackConfig) -> TrainingNamespaceArgs:
        return cls(
            identity=Identity.of(cfg),
            own_namespace=cfg.owns_namespace,
            retain_namespace=cfg.retains_namespace,
            quota_hard=quota_hard(cfg),
            service_account_name=cfg.service_account_name,
            statefulset_name=cfg.statefulset_name,
            max_replicas=workers.max_replicas(cfg),
        )


def namespace_metadata(ident: Identity) -> k8s.meta.v1.ObjectMetaArgs:
    """Namespace with Pod Security Admission ``restricted`` enforced (and audited, warned)."""
    psa: dict[str, str] = {}
    for mode in ("enforce", "audit", "warn"):
        psa[f"pod-security.kubernetes.io/{mode}"] = PSA_LEVEL
        psa[f"pod-security.kubernetes.io/{mode}-version"] = PSA_VERSION
    return metadata(ident, ident.namespace, "namespace", namespaced=False, labels=psa)


def policy_rules(rules: list[dict]) -> list[k8s.rbac.v1.PolicyRuleArgs]:
    """``contract.role_rules`` (plain dictionaries: :mod:`infra.admission` reads them too) as
    the Role's typed ``rules``."""
    return [
        k8s.rbac.v1.PolicyRuleArgs(
            api_groups=r["apiGroups"],
            resources=r["resources"],
            resource_names=r["resourceNames"],
            verbs=r["verbs"],
        )
        for r in rules
    ]


def role_name(ident: Identity) -> str:
    return f"{ident.app_name}-trainer"


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
        ident = args.identity
        # One rule per call in contract.API_CALLS, on the names the trainer may touch.
        self.role_rules = contract.role_rules(args.statefulset_name, args.max_replicas)
        namespaced: list[pulumi.Resource] = []
        if args.own_namespace:
            ns = k8s.core.v1.Namespace(
                name,
                metadata=namespace_metadata(ident),
                opts=self.child_opts(retain_on_delete=args.retain_namespace),
            )
            namespaced.append(ns)
            self.namespace_name = ns.metadata.apply(lambda m: m.name)
        else:
            self.namespace_name = pulumi.Output.from_input(ident.namespace)
        in_ns = self.child_opts(depends_on=namespaced)
        if args.own_namespace:
            # A quota counts every pod of its namespace: only in the stack's own (infra.quota).
            k8s.core.v1.ResourceQuota(
                f"{name}-quota",
                metadata=metadata(ident, quota_name(ident.app_name), "quota"),
                spec=k8s.core.v1.ResourceQuotaSpecArgs(hard=dict(args.quota_hard)),
                opts=in_ns,
            )
        # The workers' dedicated ServiceAccount; no token is automounted from it.
        sa = k8s.core.v1.ServiceAccount(
            f"{name}-worker",
            metadata=metadata(ident, args.service_account_name, "worker"),
            automount_service_account_token=False,
            opts=in_ns,
        )
        role = k8s.rbac.v1.Role(
            f"{name}-trainer",
            metadata=metadata(ident, role_name(ident), "worker"),
            rules=policy_rules(self.role_rules),
            opts=in_ns,
        )
        # Binds the Role to the workers' ServiceAccount (both in the training namespace).
        k8s.rbac.v1.RoleBinding(
            f"{name}-trainer",
            metadata=metadata(ident, role_name(ident), "worker"),
            role_ref=k8s.rbac.v1.RoleRefArgs(
                api_group="rbac.authorization.k8s.io", kind="Role", name=role_name(ident)
            ),
            subjects=[
                k8s.rbac.v1.SubjectArgs(
                    kind="ServiceAccount", name=args.service_account_name, namespace=ident.namespace
                )
            ],
            opts=self.child_opts(depends_on=[role, sa]),
        )
        self.service_account_name = sa.metadata.apply(lambda m: m.name)
        self.register_outputs(
            {"namespace": self.namespace_name, "service_account": self.service_account_name}
        )
