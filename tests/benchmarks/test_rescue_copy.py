"""``python -m benchmarks.rescue_copy`` runs and prints its table (a short run of the smallest
size: the figures are the benchmark's, not checked here)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_it_times_the_copy_the_save_and_the_restore_beside_the_call(tmp_path: Path):
    figures = tmp_path / "rescue.json"
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.rescue_copy", "--sizes", "2m", "--repeats", "6",
         "--saves", "2", "--json", str(figures)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [line for line in out.stdout.splitlines() if line.startswith("| 2m |")]
    assert len(rows) == 1 and rows[0].count("|") == 15, out.stdout
    [row] = json.loads(figures.read_text())["rows"]
    for name, n in (("call_s", 6), ("copy_s", 6), ("stall_s", 2), ("restore_s", 2)):
        assert row[name]["median"] > 0 and row[name]["n"] == n, (name, row[name])
    assert row["copy_bytes"] > 8 * 2_000_000 and row["k"] >= 1, row
    assert row["steps_recomputed_max"] == row["k"] * 2, row
