"""``tools/affected_stacks.py``: which stacks a pull request's changes affect."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tools import affected_stacks

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "affected_stacks.py"

CASES = [
    ("docs only", ["docs/infra.md", "README.md"], []),
    ("tests only", ["tests/infra/test_config.py"], []),
    ("its stack file", ["Pulumi.prod.yaml"], ["prod"]),
    ("another stack's file", ["Pulumi.dev.yaml"], []),
    ("the program", ["infra/workers.py"], ["prod", "e2e"]),
    ("the entry point", ["__main__.py"], ["prod", "e2e"]),
    ("the project file", ["Pulumi.yaml"], ["prod", "e2e"]),
    ("the policy pack", ["policy/rules.py"], ["prod", "e2e"]),
    ("the image sources", ["trainer/train.py"], ["prod", "e2e"]),
    ("the Dockerfile", ["Dockerfile"], ["prod", "e2e"]),
    ("deploy pins", ["requirements/infra.txt"], ["prod", "e2e"]),
    ("test-only pins", ["requirements/dev.txt"], []),
]


@pytest.mark.parametrize(("changed", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_affected(changed: list[str], expected: list[str]) -> None:
    assert affected_stacks.affected(changed, ["prod", "e2e"]) == expected


def test_cli_refuses_a_stack_without_a_file() -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--base", "HEAD", "--head", "HEAD", "--stacks", "nope"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.strip() == "error: --stacks: no Pulumi.nope.yaml for stack 'nope'"


def test_cli_prints_a_github_output_line() -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--base", "HEAD", "--head", "HEAD", "--stacks", "prod,e2e"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert (result.returncode, result.stdout) == (0, "stacks=[]\n"), result.stderr
