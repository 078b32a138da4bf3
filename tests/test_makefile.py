"""The Makefile's long set-up steps say what they install and about how long, as they start:
``make test`` on a fresh clone was silent for minutes (pip for three venvs, npm, apt as root)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

MAKEFILE = Path(__file__).resolve().parents[1] / "Makefile"
LONG_STEPS = re.compile(r"pip install --quiet -r|^npm ci|apt-get install -y")
DURATION = re.compile(r"(~?\d+ s\b|a minute|few seconds)")


def _recipes() -> dict[str, list[str]]:
    """Each rule's recipe lines (the shell lines under ``target:``), by target."""
    recipes: dict[str, list[str]] = {}
    target = ""
    for line in MAKEFILE.read_text().splitlines():
        if line.startswith("\t") and target:
            recipes[target].append(line.strip())
        elif re.match(r"^[^\s#=][^=]*:", line) and not line.startswith(".PHONY"):
            target = line.split(":", 1)[0]
            recipes[target] = []
        elif not line.startswith("\t") and not line.startswith("#") and line.strip():
            target = ""
    return recipes


SLOW = {t: r for t, r in _recipes().items() if any(LONG_STEPS.search(x) for x in r)}


def test_the_slow_set_up_steps_are_found():
    assert {"$(VENV)/.installed", "$(CHECKOV_VENV)/.installed", "$(POLICY_VENV)/.installed",
            "node_modules/.installed", "promtool"} <= set(SLOW), sorted(SLOW)  # fmt: skip


@pytest.mark.parametrize("target", sorted(SLOW))
def test_a_long_set_up_step_announces_what_and_how_long_before_it_starts(target: str):
    recipe = SLOW[target]
    first = next(i for i, x in enumerate(recipe) if LONG_STEPS.search(x))
    said = [x for x in recipe[: first + 1] if re.search(r'echo "installing ', x)]
    assert said, f"{target}: no 'echo \"installing ...\"' before {recipe[first]!r}"
    assert DURATION.search(said[0]), f"{target}: the announcement gives no duration: {said[0]}"
    if "apt-get" in recipe[first]:
        assert "as root" in said[0], f"{target}: say that it installs as root: {said[0]}"
