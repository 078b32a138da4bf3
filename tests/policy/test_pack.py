"""Every policy of the pack on the rendered stacks (the real program under Pulumi mocks).

The stacks are rendered here; the policies run in the pack's own venv (``.venv-policy``, see
``tests/policy/pack_runner.py``) exactly as the analyzer calls them: the policy SDK's argument
types, the inputs behind its unknown-checking proxy, the stack's config read from the project
files. ``dev``, ``prod`` and ``e2e`` pass every policy; each violating variant (one rendered
stack, one change) fails exactly the policy it targets, with a message naming the resource and
the fix.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.policy.variants import POLICIES, STACKS, UNKNOWN_IMAGE, VARIANTS, Variant
from tools.render import Registered, render_stack

ROOT = Path(__file__).resolve().parents[2]
PROJECT = "tf-distributed"
EXISTING = {"namespaceMode": "existing"}


def _case(
    case_id: str,
    stack: str,
    resources: list[Registered],
    config: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "id": case_id,
        "stack": stack,
        "config": dict(config or {}),
        "resources": [
            {
                "type": r.type,
                "name": r.name,
                "inputs": r.inputs,
                "retain_on_delete": r.retain_on_delete,
            }
            for r in resources
        ],
    }


@pytest.fixture(scope="module")
def pack_run() -> dict[str, Any]:
    """Every case (committed stacks, variants, an unknown image) through the pack, once."""
    rendered = {stack: render_stack(stack).resources for stack in STACKS}
    cases = [_case(stack, stack, rendered[stack]) for stack in STACKS]
    for stack in STACKS:
        # The program in a namespace it does not own: no Namespace, policies on its own pods.
        existing = render_stack(stack, {f"{PROJECT}:{k}": v for k, v in EXISTING.items()})
        cases.append(_case(f"{stack}-existing", stack, existing.resources, EXISTING))
        cases.append(_case(f"{stack}-existing-unset", stack, existing.resources))
    for variant in [*VARIANTS, UNKNOWN_IMAGE]:
        resources = copy.deepcopy(rendered[variant.stack])
        variant.change(resources)
        cases.append(_case(variant.id, variant.stack, resources, variant.config))
    python = ROOT / os.environ.get("TFD_POLICY_PYTHON", ".venv-policy/bin/python")
    if not python.is_file():
        pytest.fail(
            f"TFD_POLICY_PYTHON: the policy venv's python not found at {python} (run `make test`)"
        )
    result = subprocess.run(
        [str(python), "-m", "tests.policy.pack_runner"],
        cwd=ROOT,  # the analyzer's working directory: the project, with its stack files
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, f"pack_runner failed: {result.stderr[-3000:]}"
    return json.loads(result.stdout)


def test_the_pack_has_every_policy_mandatory(pack_run: dict[str, Any]) -> None:
    assert {name for name, _ in pack_run["policies"]} == POLICIES
    assert {level for _, level in pack_run["policies"]} == {"mandatory"}


@pytest.mark.parametrize("stack", STACKS)
def test_committed_stacks_pass_every_policy(stack: str, pack_run: dict[str, Any]) -> None:
    assert pack_run["results"][stack] == {}


@pytest.mark.parametrize("stack", STACKS)
def test_a_stack_in_an_existing_namespace_passes_when_the_setting_says_so(
    stack: str, pack_run: dict[str, Any]
) -> None:
    assert pack_run["results"][f"{stack}-existing"] == {}
    # The same resources, read as a stack that should declare its namespace: refused.
    found = pack_run["results"][f"{stack}-existing-unset"]
    assert set(found) == {"namespace-isolation"}, found
    assert any(
        f"namespace 'tfd-{stack}'" in m and "not declared by the stack" in m
        for m in found["namespace-isolation"]
    ), found


@pytest.mark.parametrize("variant", VARIANTS, ids=[v.id for v in VARIANTS])
def test_violating_variant_fails_its_policy_only(
    variant: Variant, pack_run: dict[str, Any]
) -> None:
    found = pack_run["results"][variant.id]
    assert set(found) == {variant.policy}, f"{variant.id}: policies that reported: {found}"
    messages = found[variant.policy]
    assert any(all(part in m for part in variant.expected) for m in messages), (
        f"{variant.id}: no message of {variant.policy} has all of {variant.expected}: {messages}"
    )
    assert all("; fix: " in m for m in messages), messages


def test_every_policy_has_a_failing_variant() -> None:
    assert {v.policy for v in VARIANTS} == POLICIES


def test_an_image_unknown_at_preview_is_left_to_the_sdk(pack_run: dict[str, Any]) -> None:
    """A built image's digest is unknown during preview: reading it raises the SDK's
    UnknownValueError, which the SDK reports as "can't run policy ... during preview"."""
    found = pack_run["results"]["unknown-image"]
    assert found == {
        "images-pinned": [
            "unknown: string value at .spec.template.spec.containers.0.image "
            "can't be known during preview"
        ]
    }, found
