"""Where a deployment comes from: the program's source commit and its configuration's digest.

Every ``pulumi up`` records both, with the image's digest, as stack outputs (``sourceCommit``,
``configHash``, ``imageDigest``) and as annotations of the worker StatefulSet
(``trainer.contract.PROVENANCE_ANNOTATIONS``), from which the chief copies them into the run's
manifest. They are annotations of the StatefulSet's own metadata, not of its pod template: a
new commit or another setting alone restarts no worker.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from collections.abc import Collection, Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any

PROGRAM_DIR = Path(__file__).resolve().parent.parent


def source_commit(directory: Path = PROGRAM_DIR) -> str:
    """The commit (``git rev-parse HEAD``) of the checkout holding ``directory``; ``""`` outside
    a git checkout or without git. Uncommitted changes are not marked: files the tests and
    tools write into a checkout would make every ``up`` a change of the StatefulSet."""
    try:
        done = subprocess.run(
            ["git", "-C", str(directory), "rev-parse", "--verify", "--quiet", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    commit = done.stdout.strip()
    return commit if done.returncode == 0 and len(commit) in (40, 64) else ""


def _plain(value: Any) -> Any:
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    return value if isinstance(value, str | int | float | bool | type(None)) else repr(value)


def config_digest(values: Mapping[str, Any], secret_keys: Collection[str]) -> str:
    """SHA-256 (hex) of the effective configuration: every key's parsed value (defaults
    included); of a key in ``secret_keys`` only whether it is set (``values`` holds a truth
    value for it), so the digest depends on no secret."""
    doc = {key: bool(v) if key in secret_keys else _plain(v) for key, v in values.items()}
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()
