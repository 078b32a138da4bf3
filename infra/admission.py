"""The workers may scale their StatefulSet to zero, and to nothing else.

The trainer's only write on its StatefulSet is ``onDone: scale-to-zero`` (``patch`` on
``statefulsets/scale``, :data:`trainer.contract.API_CALLS`); RBAC cannot restrict the value
of a patch, so a stolen worker token could otherwise set any replica count. A
``ValidatingAdmissionPolicy`` (``admissionregistration.k8s.io/v1``, GA in Kubernetes 1.30) and
its binding deny every other ``spec.replicas`` from the workers' ServiceAccount:

* the policy matches ``UPDATE`` (a ``PATCH`` is an ``UPDATE`` to admission) of every
  StatefulSet resource the Role lets the workers write (:func:`guarded_resources`, derived from
  the Role's rules), only for requests whose user is
  ``system:serviceaccount:<namespace>:<serviceaccount>``;
* it allows a request whose object (a ``Scale`` for the subresource) has ``spec.replicas`` 0 or
  none (``Scale`` omits a zero);
* the binding (``validationActions: [Deny]``) applies it in the training namespace only.

Both objects are cluster-scoped: their name carries the namespace and the StatefulSet
(:func:`policy_name`), so two stacks never share or overwrite one. The HPA, the deployer and
anyone else are not matched and scale as before.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from infra.component import Component
from infra.config import StackConfig
from infra.labels import Identity, metadata
from infra.network import NAMESPACE_NAME_LABEL

COMPONENT_TYPE = "tfd:infra:WorkerScaleGuard"
API_GROUP = "apps"
WRITE_VERBS = frozenset({"create", "update", "patch"})
ALLOWED_REPLICAS = 0
REPLICAS_ALLOWED = (
    f"!has(object.spec) || !has(object.spec.replicas) || object.spec.replicas == {ALLOWED_REPLICAS}"
)
"""CEL over the admitted object: a ``Scale`` with replicas 0 is serialized without the field."""


@dataclass(frozen=True)
class WorkerScaleGuardArgs:
    """Inputs of :class:`WorkerScaleGuard`.

    Attributes:
        identity: labels of both objects and the training namespace they guard.
        service_account_name: the workers' ServiceAccount (whose requests are matched).
        statefulset_name: the workers' StatefulSet (in the objects' names and the message).
        role_rules: the workers' Role rules (the writes to guard).
    """

    identity: Identity
    service_account_name: str
    statefulset_name: str
    role_rules: list[dict]

    @classmethod
    def from_config(cls, cfg: StackConfig, role_rules: list[dict]) -> WorkerScaleGuardArgs:
        return cls(
            identity=Identity.of(cfg),
            service_account_name=cfg.service_account_name,
            statefulset_name=cfg.statefulset_name,
            role_rules=role_rules,
        )


def service_account_user(args: WorkerScaleGuardArgs) -> str:
    """The API server's user name of the workers' ServiceAccount tokens."""
    return f"system:serviceaccount:{args.identity.namespace}:{args.service_account_name}"


def policy_name(args: WorkerScaleGuardArgs) -> str:
    """Cluster-wide unique per stack: namespace (no dots in a label) and StatefulSet name."""
    return policy_name_for(args.identity.namespace, args.statefulset_name)


def policy_name_for(namespace: str, statefulset: str) -> str:
    """The policy's (and binding's) name for a StatefulSet in a namespace."""
    return f"{namespace}.{statefulset}.scale-to-zero"


def guarded_resources(rules: list[dict]) -> list[str]:
    """The ``apps`` StatefulSet resources (``statefulsets``, ``statefulsets/scale``) that
    ``rules`` (a Role's) let their subject write: the ones the policy must guard."""
    out: list[str] = []
    for rule in rules:
        if API_GROUP not in rule["apiGroups"] or not WRITE_VERBS & set(rule["verbs"]):
            continue
        out += [r for r in rule["resources"] if r.split("/")[0] == "statefulsets" and r not in out]
    return out


def denial_message(args: WorkerScaleGuardArgs) -> str:
    return (
        f"the workers' ServiceAccount {args.service_account_name} may only scale StatefulSet "
        f"{args.identity.namespace}/{args.statefulset_name} to {ALLOWED_REPLICAS} replicas "
        "(onDone: "
        "scale-to-zero); other replica counts come from the stack's replicas or its HPA"
    )


def policy_spec(
    args: WorkerScaleGuardArgs,
) -> k8s.admissionregistration.v1.ValidatingAdmissionPolicySpecArgs:
    """The ``ValidatingAdmissionPolicy``'s ``spec`` for the Role ``args.role_rules``."""
    message = denial_message(args)
    return k8s.admissionregistration.v1.ValidatingAdmissionPolicySpecArgs(
        failure_policy="Fail",
        match_constraints=k8s.admissionregistration.v1.MatchResourcesArgs(
            resource_rules=[
                k8s.admissionregistration.v1.NamedRuleWithOperationsArgs(
                    api_groups=[API_GROUP],
                    api_versions=["*"],
                    operations=["UPDATE"],
                    resources=guarded_resources(args.role_rules),
                )
            ]
        ),
        match_conditions=[
            k8s.admissionregistration.v1.MatchConditionArgs(
                name="workers-service-account",
                expression=f"request.userInfo.username == '{service_account_user(args)}'",
            )
        ],
        validations=[
            k8s.admissionregistration.v1.ValidationArgs(
                expression=REPLICAS_ALLOWED,
                message=message,
                # A CEL string literal: JSON's double-quoted form (the message has quotes).
                message_expression=f"{json.dumps(message + '; got ')} + "
                "string(object.spec.replicas)",
                reason="Forbidden",
            )
        ],
    )


def binding_spec(
    args: WorkerScaleGuardArgs,
) -> k8s.admissionregistration.v1.ValidatingAdmissionPolicyBindingSpecArgs:
    """The binding: the policy, denying, in the training namespace only."""
    return k8s.admissionregistration.v1.ValidatingAdmissionPolicyBindingSpecArgs(
        policy_name=policy_name(args),
        validation_actions=["Deny"],
        match_resources=k8s.admissionregistration.v1.MatchResourcesArgs(
            namespace_selector=k8s.meta.v1.LabelSelectorArgs(
                match_labels={NAMESPACE_NAME_LABEL: args.identity.namespace}
            )
        ),
    )


class WorkerScaleGuard(Component):
    """The ValidatingAdmissionPolicy and its binding (both cluster-scoped)."""

    def __init__(
        self, name: str, args: WorkerScaleGuardArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(COMPONENT_TYPE, name, opts)
        # Cluster-scoped, both named after the namespace and the StatefulSet (policy_name).
        meta = metadata(args.identity, policy_name(args), "worker", namespaced=False)
        policy = k8s.admissionregistration.v1.ValidatingAdmissionPolicy(
            name,
            metadata=meta,
            spec=policy_spec(args),
            opts=self.child_opts(),
        )
        k8s.admissionregistration.v1.ValidatingAdmissionPolicyBinding(
            name,
            metadata=meta,
            spec=binding_spec(args),
            opts=self.child_opts(depends_on=[policy]),
        )
        self.register_outputs({"policy": policy.metadata.apply(lambda m: m.name)})
