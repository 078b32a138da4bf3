"""``docs/config-reference.md`` is generated from ``Pulumi.yaml`` and must not drift."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from infra.config import project_declarations
from tools import config_reference

ROOT = Path(__file__).resolve().parents[2]


def test_the_committed_reference_is_what_pulumi_yaml_generates() -> None:
    committed = (ROOT / "docs" / "config-reference.md").read_text()
    assert committed == config_reference.render(), (
        "docs/config-reference.md is stale against Pulumi.yaml: run "
        ".venv/bin/python -m tools.config_reference"
    )
    assert config_reference.main(["--check"]) == 0


def rows(text: str) -> dict[str, list[str]]:
    out = {}
    for line in text.splitlines():
        match = re.match(r"^\| `([A-Za-z]\w*)`( \(secret\))? \| (.*) \|$", line)
        if match:
            out[match.group(1)] = [c.strip() for c in match.group(3).split(" | ")]
    return out


def test_every_declared_key_has_one_row_with_its_type_and_default() -> None:
    table = rows(config_reference.render())
    declared = project_declarations(ROOT / "Pulumi.yaml")
    assert set(table) == set(declared)
    for key, d in declared.items():
        type_, default = table[key][0], table[key][1]
        assert type_.startswith(d.type), f"{key}: {type_} vs {d.type}"
        if isinstance(d.default, str) and d.default:
            assert default == f"`{d.default}`", f"{key}: {default} vs {d.default!r}"


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("Number of workers (1-1000).", "Number of workers (1-64)."),
        ("    default: 2Gi\n", "    default: 3Gi\n"),
        ("  # --- Autoscaling ---\n", "  # --- Scaling ---\n"),
    ],
    ids=["description", "default", "group"],
)
def test_a_change_to_pulumi_yaml_changes_the_reference(tmp_path: Path, old: str, new: str) -> None:
    source = (ROOT / "Pulumi.yaml").read_text()
    assert old in source, f"test premise: {old!r} not in Pulumi.yaml"
    changed = tmp_path / "Pulumi.yaml"
    changed.write_text(source.replace(old, new, 1))
    rendered = config_reference.render(changed)
    assert rendered != config_reference.render()
    assert new.strip().removeprefix("default: ").strip("# -") in rendered
