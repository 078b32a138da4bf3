"""``make e2e`` (``tools/e2e.sh``) checks its disk headroom first: one line, nothing started."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_too_little_free_disk_is_one_line_before_anything_starts(tmp_path: Path) -> None:
    # More than any disk has: the check must refuse before the Docker daemon or a cluster starts.
    env = {**os.environ, "HOME": str(tmp_path), "TFD_E2E_MIN_FREE_GB": "100000000"}
    env.pop("DOCKER_HOST", None)
    docker_log = ROOT / ".tools" / "docker" / "dockerd.log"
    before = docker_log.stat().st_mtime_ns if docker_log.exists() else None
    done = subprocess.run(
        ["bash", str(ROOT / "tools" / "e2e.sh")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
    (line,) = done.stderr.splitlines()
    assert line.startswith("e2e: needs 100000000 GB free on the disk of "), line
    assert "TFD_E2E_MIN_FREE_GB" in line, line
    assert done.stdout == "e2e: 0 passed, 1 failed (not enough free disk)\n", done.stdout
    # Nothing was started: the Docker daemon's log is as it was, and the cache holds nothing.
    after = docker_log.stat().st_mtime_ns if docker_log.exists() else None
    assert after == before, "tools/e2e.sh started the Docker daemon despite the disk check"
    assert sorted(p.name for p in tmp_path.rglob("*")) == [".cache", "tf-distributed"]
