"""Fixtures: each stack rendered once per session under Pulumi mocks (the real program)."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra.render import STACKS, Rendered, render_stack, write_rendered


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
