"""namespaceMode and monitoringNamespaceMode: what the stack registers in a namespace it creates,
and in one it does not own (rendered by the real program under mocks)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tools.render import Rendered, render_stack

ROOT = Path(__file__).resolve().parents[2]
P = "tf-distributed:"
EXISTING = {P + "namespaceMode": "existing"}
OWN_POD_LABELS = {"app.kubernetes.io/name": "tf-distributed", "app.kubernetes.io/instance": "tfd"}


def _namespaces(result: Rendered) -> list[str]:
    return [m["metadata"]["name"] for m in result.by_kind("Namespace")]


def _policy(result: Rendered, suffix: str) -> dict:
    (policy,) = [
        p for p in result.by_kind("NetworkPolicy") if p["metadata"]["name"].endswith(suffix)
    ]
    return policy


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_an_existing_namespace_is_neither_declared_nor_labelled(stack):
    result = render_stack(stack, EXISTING)
    namespace = f"tfd-{stack}"
    assert namespace not in _namespaces(result), f"Pulumi.{stack}.yaml + existing: {result}"
    # Nothing the stack registers can change the namespace's labels or quota.
    assert result.by_kind("ResourceQuota") == [], f"Pulumi.{stack}.yaml + existing: a quota"
    # Its own objects are still there, in that namespace.
    kinds = {m["kind"] for m in result.manifests if m["metadata"].get("namespace") == namespace}
    assert {"StatefulSet", "Service", "ServiceAccount", "Role", "RoleBinding"} <= kinds, kinds
    assert {"PersistentVolumeClaim", "NetworkPolicy", "PodDisruptionBudget"} <= kinds, kinds
    assert [r.name for r in result.resources if r.retain_on_delete] == (
        ["workers-checkpoints"] if stack == "prod" else []
    ), f"Pulumi.{stack}.yaml + existing: only a Retain claim is kept"
    assert result.outputs["namespace"] == namespace


@pytest.mark.parametrize("suffix", ["default-deny", "dns"])
def test_namespace_wide_policies_select_only_the_stacks_pods_in_an_existing_namespace(suffix):
    # A policy isolates every pod it selects: {} would cut the owner's workloads off.
    own = _policy(render_stack("dev", EXISTING), suffix)["spec"]["podSelector"]
    assert own == {"matchLabels": OWN_POD_LABELS}, f"{suffix}: {own}"
    created = _policy(render_stack("dev"), suffix)["spec"]["podSelector"]
    assert created == {}, f"{suffix} in the stack's own namespace: {created}"


def test_the_stacks_pods_carry_the_labels_its_policies_select():
    result = render_stack("dev", EXISTING)
    labels = result.one("StatefulSet")["spec"]["template"]["metadata"]["labels"]
    selector = _policy(result, "default-deny")["spec"]["podSelector"]["matchLabels"]
    assert selector.items() <= labels.items(), f"{selector} not on pod labels {labels}"


def test_a_created_namespace_is_the_stacks_own():
    result = render_stack("prod")
    (ns,) = [r for r in result.resources if r.kind == "Namespace" and r.name == "training"]
    labels = ns.metadata["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    assert ns.retain_on_delete is True, "Retain keeps the namespace that holds the claim"


@pytest.mark.parametrize(
    ("overrides", "created"),
    [
        ({}, True),
        ({P + "monitoringNamespaceMode": "existing"}, False),
        ({P + "monitoringInstall": False}, False),
    ],
)
def test_monitoring_namespace_is_created_only_when_the_stack_owns_it(overrides, created):
    result = render_stack("prod", overrides)
    assert ("monitoring" in _namespaces(result)) is created, f"Pulumi.prod.yaml + {overrides}"
    never_kept = [r.name for r in result.resources if r.kind == "Namespace" and r.retain_on_delete]
    assert never_kept == ["training"], f"Pulumi.prod.yaml + {overrides}: kept {never_kept}"
    if overrides.get(P + "monitoringNamespaceMode") == "existing":
        # The install still goes into the named namespace.
        (release,) = [r for r in result.resources if r.type == "kubernetes:helm.sh/v3:Release"]
        assert release.inputs["namespace"] == "monitoring", release.inputs
        dashboard = result.one("ConfigMap")
        assert dashboard["metadata"]["namespace"] == "monitoring", dashboard["metadata"]


def test_the_documented_adoption_commands_name_what_the_program_registers():
    """docs/infra.md's commands after a Retain destroy: every URN, type, name and id is the
    prod example's, as the program registers them."""
    text = (ROOT / "docs" / "infra.md").read_text()
    section = text[text.index("## Checkpoint retention") : text.index("## Lifecycle")]
    resources = [*render_stack("prod").resources, *render_stack("prod", EXISTING).resources]
    urns = {r.urn for r in resources}
    named = set(re.findall(r"urn:pulumi:[^'\s]+", section))
    assert len(named) == 4 and named <= urns, sorted(named - urns)
    imports = re.findall(r"pulumi import (\S+) (\S+) (\S+)", section)
    assert len(imports) == 2, imports
    for type_, name, id_ in imports:
        (res,) = [r for r in resources if (r.type, r.name) == (type_, name)][:1]
        meta = res.metadata
        expected = f"{meta['namespace']}/{meta['name']}" if "namespace" in meta else meta["name"]
        assert id_ == expected, f"pulumi import {type_} {name}: id {id_}, program {expected}"
