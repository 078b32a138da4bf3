"""Fixtures of the infra tests (the rendered stacks, ``rendered`` and ``rendered_dirs``, are
suite-wide: tests/conftest.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

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
