"""``Pulumi.yaml``'s ``config:`` block is generated from the key table and must not drift."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from infra.config import KEYS, project_declarations
from tools import project_config

ROOT = Path(__file__).resolve().parents[2]


def test_the_committed_pulumi_yaml_is_what_the_key_table_generates() -> None:
    committed = (ROOT / "Pulumi.yaml").read_text()
    assert committed == project_config.project_file(committed), (
        "Pulumi.yaml is stale against the key table: run .venv/bin/python -m tools.project_config"
    )
    assert project_config.main(["--check"]) == 0


def test_the_cli_reads_back_every_key_as_the_table_defines_it() -> None:
    # What the Pulumi CLI parses out of the generated YAML: each scalar must read back exactly.
    declared = project_declarations(ROOT / "Pulumi.yaml")
    assert list(declared) == list(KEYS)
    for name, key in KEYS.items():
        d = declared[name]
        got = (d.type, d.items_type, d.default, d.description)
        expected = (key.kind.pulumi_type, key.kind.items_type, key.default, key.description)
        assert got == expected, f"Pulumi.yaml {name}: {got} != {expected}"
    config = yaml.safe_load((ROOT / "Pulumi.yaml").read_text())["config"]
    assert config["pulumi:disable-default-providers"] == {"value": ["kubernetes"]}
    assert not any(spec.get("secret") for spec in config.values()), "secret: cannot default"


@pytest.mark.parametrize(
    "value",
    ["1", "", "tfd", "a: b", "'quoted' start", "x #y", "true", "0.1.0", " pad", "ü", 0, False],
)
def test_scalars_read_back_as_written(value: object) -> None:
    assert yaml.safe_load(f"k: {project_config.scalar(value)}") == {"k": value}


def test_the_project_head_is_kept_and_the_rest_generated() -> None:
    head = "name: tf-distributed\nruntime: python\n\n"
    text = project_config.project_file(head + "# old comment\nconfig:\n  stale: {}\n")
    assert text.startswith(head) and "stale" not in text and "  appName:\n" in text


def test_a_change_to_a_key_changes_pulumi_yaml() -> None:
    current = (ROOT / "Pulumi.yaml").read_text()
    keys = [
        dataclasses.replace(key, default=3) if name == "replicas" else key
        for name, key in KEYS.items()
    ]
    changed = project_config.project_file(current, keys)
    assert changed != current
    assert yaml.safe_load(changed)["config"]["replicas"]["default"] == 3
