"""The ValidatingAdmissionPolicy that holds the workers' scale calls at zero, and its binding."""

from __future__ import annotations

import pytest

from infra.admission import REPLICAS_ALLOWED, guarded_resources
from tools.render import render_stack
from trainer import contract

P = "tf-distributed:"
STACKS = ("dev", "prod")


def _guard(result):
    return result.one("ValidatingAdmissionPolicy"), result.one("ValidatingAdmissionPolicyBinding")


@pytest.mark.parametrize("stack", STACKS)
def test_policy_matches_the_workers_scale_updates_only(stack):
    result = render_stack(stack)
    policy, _ = _guard(result)
    spec = policy["spec"]
    namespace = f"tfd-{stack}"
    sa = result.one("ServiceAccount")["metadata"]["name"]
    assert policy["apiVersion"] == "admissionregistration.k8s.io/v1"
    assert spec["failurePolicy"] == "Fail"
    assert spec["matchConstraints"]["resourceRules"] == [
        {
            "apiGroups": ["apps"],
            "apiVersions": ["*"],
            "operations": ["UPDATE"],
            "resources": ["statefulsets/scale"],
        }
    ], f"stack {stack}"
    assert spec["matchConditions"] == [
        {
            "name": "workers-service-account",
            "expression": f"request.userInfo.username == 'system:serviceaccount:{namespace}:{sa}'",
        }
    ], f"stack {stack}"
    (validation,) = spec["validations"]
    assert validation["expression"] == REPLICAS_ALLOWED
    assert "object.spec.replicas == 0" in validation["expression"]
    assert (
        f"may only scale StatefulSet {namespace}/tfd-worker to 0 replicas"
        in (validation["message"])
    )
    assert validation["reason"] == "Forbidden"


@pytest.mark.parametrize("stack", STACKS)
def test_binding_denies_in_the_training_namespace_only(stack):
    policy, binding = _guard(render_stack(stack))
    assert binding["spec"] == {
        "policyName": policy["metadata"]["name"],
        "validationActions": ["Deny"],
        "matchResources": {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": f"tfd-{stack}"}}
        },
    }, f"stack {stack}"


def test_every_write_the_role_grants_on_the_statefulset_is_guarded():
    result = render_stack("prod")
    (role,) = result.by_kind("Role")
    writes = {
        r
        for rule in role["rules"]
        if "apps" in rule["apiGroups"] and set(rule["verbs"]) & {"create", "update", "patch"}
        for r in rule["resources"]
    }
    guarded = result.one("ValidatingAdmissionPolicy")["spec"]["matchConstraints"]
    assert writes == set(guarded["resourceRules"][0]["resources"]) == {"statefulsets/scale"}
    # A Role that also let the workers patch the StatefulSet itself would be guarded there too.
    rules = [*contract.role_rules("w", 1), {**role["rules"][0], "verbs": ["get", "patch"]}]
    assert guarded_resources(rules) == ["statefulsets/scale", "statefulsets"]


@pytest.mark.parametrize(
    ("overrides", "name"),
    [
        ({}, "tfd-prod.tfd-worker.scale-to-zero"),
        ({P + "namespace": "team-a"}, "team-a.tfd-worker.scale-to-zero"),
        ({P + "appName": "llm"}, "tfd-prod.llm-worker.scale-to-zero"),
    ],
)
def test_cluster_scoped_names_are_unique_per_stack(overrides, name):
    result = render_stack("prod", overrides)
    policy, binding = _guard(result)
    assert policy["metadata"]["name"] == binding["metadata"]["name"] == name
    assert "namespace" not in policy["metadata"] and "namespace" not in binding["metadata"]


@pytest.mark.parametrize("overrides", [{}, {P + "namespaceMode": "existing"}])
def test_the_statefulset_waits_for_the_binding(overrides):
    # Created after the guard: no worker token exists before the policy holds.
    resources = render_stack("dev", overrides).resources
    (sts,) = [r for r in resources if r.type == "kubernetes:apps/v1:StatefulSet"]
    assert any(
        u.endswith(":ValidatingAdmissionPolicyBinding::scale-guard") for u in sts.dependencies
    ), f"StatefulSet dependencies: {sts.dependencies}"
