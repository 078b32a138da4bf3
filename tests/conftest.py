"""Suite-wide fixtures."""

from __future__ import annotations

import os

import pytest

from infra.render import MOCK_DOCKER_HOST


@pytest.fixture(autouse=True)
def _docker_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """A minikube stack that builds its image refuses to run without ``DOCKER_HOST``
    (``infra.config``); the suite parses such stacks but never builds, so it supplies one.
    Tests of that rule pass ``environ`` to ``parse_config`` explicitly."""
    if not os.environ.get("DOCKER_HOST"):  # the e2e suite's private daemon stays in charge
        monkeypatch.setenv("DOCKER_HOST", MOCK_DOCKER_HOST)
