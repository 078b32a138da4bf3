"""Suite-wide fixtures: each stack rendered once per session under Pulumi mocks (the real
program, by tools/render.py), and a ``DOCKER_HOST`` for stacks that would build their image."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tools.render import MOCK_DOCKER_HOST, STACKS, Rendered, render_stack, write_rendered


@pytest.fixture(autouse=True)
def _docker_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """A minikube stack that builds its image refuses to run without ``DOCKER_HOST``
    (``infra.config``); the suite parses such stacks but never builds, so it supplies one.
    Tests of that rule pass ``environ`` to ``parse_config`` explicitly."""
    if not os.environ.get("DOCKER_HOST"):  # the e2e suite's private daemon stays in charge
        monkeypatch.setenv("DOCKER_HOST", MOCK_DOCKER_HOST)


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
