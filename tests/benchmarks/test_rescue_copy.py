"""``python -m benchmarks.rescue_copy`` runs and prints its figures (a short run: the figures
are the benchmark's, not checked here)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_it_times_the_call_and_the_copy_side_by_side():
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.rescue_copy", "--repeats", "20"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    first = r"\d+ variables, [\d,]+ values copied per snapshot; the first snapshot \(tracing\) "
    assert re.fullmatch(first + r"[\d.]+ ms", lines[0]), lines
    for name, unit in (("call", " ms"), ("copy", " ms"), ("share", "%")):
        [line] = [x for x in lines if x.startswith(f"{name}: ")]
        median = float(re.search(r"median ([\d.]+)", line).group(1))
        assert median > 0 and line.endswith("over 20") and unit in line, line
