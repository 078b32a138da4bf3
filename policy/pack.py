"""The policies of the pack, wired to the pure checks of :mod:`policy.rules`.

Each validate function has the signature the policy SDK calls (``args, report_violation``), so
tests call them exactly as the analyzer does, with the SDK's own argument types.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)

from infra.config.clouds import CLUSTER_KINDS
from policy import rules
from policy.facts import stack_facts

PACK_NAME = "tf-distributed"


def _report(report: ReportViolation, messages: list[str], urn: str | None = None) -> None:
    for message in messages:
        if urn is None:
            report(message)
        else:
            report(message, urn)


def validate_images(args: ResourceValidationArgs, report: ReportViolation) -> None:
    kind = rules.kind_of(args.resource_type)
    if kind in rules.POD_SPEC_PATHS:
        facts = stack_facts(args.urn, args.get_config())
        _report(report, rules.check_images(kind, args.props, facts))


def validate_containers(args: ResourceValidationArgs, report: ReportViolation) -> None:
    _report(report, rules.check_container_security(rules.kind_of(args.resource_type), args.props))


def validate_gpu(args: ResourceValidationArgs, report: ReportViolation) -> None:
    kind = rules.kind_of(args.resource_type)
    if kind in rules.POD_SPEC_PATHS:
        facts = stack_facts(args.urn, args.get_config())
        _report(report, rules.check_gpu(kind, args.props, facts))


def validate_rbac(args: ResourceValidationArgs, report: ReportViolation) -> None:
    _report(report, rules.check_rbac(rules.kind_of(args.resource_type), args.props))


def _resources(args: StackValidationArgs) -> list[rules.Resource]:
    # pulumi-policy 1.21's resource options carry no retain_on_delete (nor does the analyzer
    # protocol); read it where present, as the offline tests provide it from the program.
    return [
        rules.Resource(r.resource_type, r.props, r.name, getattr(r.opts, "retain_on_delete", None))
        for r in args.resources
    ]


def validate_namespaces(args: StackValidationArgs, report: ReportViolation) -> None:
    urn = next((r.urn for r in args.resources), "")
    facts = stack_facts(urn, args.get_config())
    _report(report, rules.check_namespace_isolation(_resources(args), facts))


def validate_hpa(args: StackValidationArgs, report: ReportViolation) -> None:
    _report(report, rules.check_hpa_targets(_resources(args)))


def validate_retention(args: StackValidationArgs, report: ReportViolation) -> None:
    urn = next((r.urn for r in args.resources), "")
    facts = stack_facts(urn, args.get_config())
    _report(report, rules.check_checkpoint_retention(_resources(args), facts))


# The stack settings a policy reads can also come from policy-pack config (same short keys).
_FACTS_SCHEMA: Mapping[str, Any] = {
    "clusterKind": {"type": "string", "enum": list(CLUSTER_KINDS)},
    "checkpointRetention": {"type": "string", "enum": ["Retain", "Delete"]},
    "checkpointUri": {"type": "string"},
    "gpuResourceName": {"type": "string"},
    "gpuNodeSelector": {"type": "array", "items": {"type": "string"}},
    "gpuTolerations": {"type": "array", "items": {"type": "string"}},
    "namespace": {"type": "string"},
    "namespaceMode": {"type": "string", "enum": ["create", "existing"]},
}

RESOURCE_POLICIES: dict[str, tuple[str, Callable[..., None]]] = {
    "images-pinned": (
        "Container images pinned by tag (never 'latest') and, on cloud stacks, by digest.",
        validate_images,
    ),
    "containers-hardened": (
        "Every container non-root, no privilege escalation, read-only root filesystem, all "
        "capabilities dropped, CPU/memory requests and limits.",
        validate_containers,
    ),
    "gpu-scheduling": (
        "GPU workloads carry GPU limits and a way onto GPU nodes: they select GPU nodes by "
        "label and tolerate the configured (or the cloud's) GPU taints.",
        validate_gpu,
    ),
    "rbac-least-privilege": (
        "No RBAC wildcards, no access to Secrets, no ClusterRoleBinding.",
        validate_rbac,
    ),
}
STACK_POLICIES: dict[str, tuple[str, Callable[..., None]]] = {
    "namespace-isolation": (
        "Every namespace running workloads enforces Pod Security 'restricted' (or is the "
        "existing namespace namespaceMode names) and denies the workloads' traffic by default.",
        validate_namespaces,
    ),
    "hpa-target-declared": (
        "Every HorizontalPodAutoscaler scales a workload the stack declares.",
        validate_hpa,
    ),
    "checkpoint-retention": (
        "Checkpoint storage is retained or deleted exactly as checkpointRetention says.",
        validate_retention,
    ),
}
FACT_POLICIES = ("images-pinned", "gpu-scheduling", "checkpoint-retention", "namespace-isolation")


def _schema(name: str):
    from pulumi_policy import PolicyConfigSchema

    return PolicyConfigSchema(properties=dict(_FACTS_SCHEMA)) if name in FACT_POLICIES else None


def policies() -> list[ResourceValidationPolicy | StackValidationPolicy]:
    """Every policy of the pack, all mandatory."""
    out: list[ResourceValidationPolicy | StackValidationPolicy] = [
        ResourceValidationPolicy(
            name=name,
            description=description,
            validate=validate,
            enforcement_level=EnforcementLevel.MANDATORY,
            config_schema=_schema(name),
        )
        for name, (description, validate) in RESOURCE_POLICIES.items()
    ]
    out += [
        StackValidationPolicy(
            name=name,
            description=description,
            validate=validate,
            enforcement_level=EnforcementLevel.MANDATORY,
            config_schema=_schema(name),
        )
        for name, (description, validate) in STACK_POLICIES.items()
    ]
    return out
