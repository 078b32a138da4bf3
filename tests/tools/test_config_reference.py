"""``docs/config-reference.md`` is generated from the key table and must not drift."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from infra.config import KEYS
from tools import config_reference

ROOT = Path(__file__).resolve().parents[2]


def test_the_committed_reference_is_what_the_key_table_generates() -> None:
    committed = (ROOT / "docs" / "config-reference.md").read_text()
    assert committed == config_reference.render(), (
        "docs/config-reference.md is stale against the key table: run "
        ".venv/bin/python -m tools.config_reference"
    )
    assert config_reference.main(["--check"]) == 0


def rows(text: str) -> dict[str, list[str]]:
    out = {}
    for line in text.splitlines():
        match = re.match(r"^\| `([A-Za-z]\w*)`( \(secret\))? \| (.*) \|$", line)
        if match:
            out[match.group(1)] = [bool(match.group(2)), *match.group(3).split(" | ")]
    return out


def test_every_key_has_one_row_with_its_type_default_and_secrecy() -> None:
    table = rows(config_reference.render())
    assert list(table) == list(KEYS)
    for name, key in KEYS.items():
        secret, type_, default = table[name][:3]
        assert secret is key.secret, f"{name}: secret {secret}"
        assert type_.startswith(key.kind.pulumi_type), f"{name}: {type_}"
        if isinstance(key.default, str) and key.default:
            assert default == f"`{key.default}`", f"{name}: {default} vs {key.default!r}"


@pytest.mark.parametrize(
    ("field", "value", "shown"),
    [
        ("about", "Number of workers, at most {range}.", "Number of workers, at most 1-1000."),
        ("default", 7, "| `7` |"),
        ("group", "Scaling", "## Scaling"),
    ],
)
def test_a_change_to_a_key_changes_the_reference(field: str, value: object, shown: str) -> None:
    keys = [
        dataclasses.replace(key, **{field: value}) if name == "replicas" else key
        for name, key in KEYS.items()
    ]
    rendered = config_reference.render(keys)
    assert rendered != config_reference.render()
    assert shown in rendered, f"replicas.{field}={value!r}"
