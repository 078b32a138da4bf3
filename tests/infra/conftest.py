"""Fixtures: each stack rendered once per session under Pulumi mocks (the real program)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from infra.render import STACKS, Rendered, render_stack, write_rendered

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def checkov() -> str:
    """Absolute path of the checkov binary (its own venv: it pins ``packaging<24``).

    ``TFD_CHECKOV`` overrides it (relative paths are taken from the repository root). A missing
    binary fails the test: the security checks are part of the suite, never skipped.
    """
    path = ROOT / os.environ.get("TFD_CHECKOV", ".venv-checkov/bin/checkov")
    if not path.is_file():
        pytest.fail(f"TFD_CHECKOV: checkov not found at {path} (run `make test`)")
    return str(path)


@pytest.fixture(scope="session")
def rendered() -> dict[str, Rendered]:
    """``{stack: Rendered}`` for every stack file of the project."""
    return {stack: render_stack(stack) for stack in STACKS}


@pytest.fixture(scope="session")
def rendered_dirs(rendered: dict[str, Rendered], tmp_path_factory) -> dict[str, Path]:
    """``{stack: DIR}`` with ``DIR/manifests`` and ``DIR/pulumi`` written by the renderer."""
    out = {}
    for stack, result in rendered.items():
        directory = tmp_path_factory.mktemp(f"render-{stack}")
        write_rendered(result, directory)
        out[stack] = directory
    return out
