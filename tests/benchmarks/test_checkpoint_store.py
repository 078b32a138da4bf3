"""``benchmarks.checkpoint_store``'s figures from known timings (the measurement itself needs the
object store stand-in: root and ``make tools``; its recorded run is in benchmarks/results)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.checkpoint_store import figures, median_interval, report

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"


def test_median_interval_is_the_order_statistic_one():
    values = [float(v) for v in range(10, 0, -1)]  # unsorted on purpose
    got = median_interval(values)
    assert (got["median"], got["low"], got["high"], got["n"]) == (5.5, 2.0, 9.0, 10), got
    assert median_interval([1.0, 2.0, 3.0])["low"] is None  # too few for a 95% interval


def test_figures_pair_each_gs_run_with_its_local_run():
    local = [0.1] * 6
    gcs = [0.1 * r for r in (10, 12, 14, 16, 18, 20)]
    raw = {"times": {"local": {"save": local, "restore": local},
                     "gcs": {"save": gcs, "restore": [2 * g for g in gcs]}},
           "bytes": {"local": 8_000_000, "gcs": 8_000_000},
           "requests": {"save": [40, 42, 44], "restore": [38, 38, 39]}}  # fmt: skip
    got = figures(raw)
    assert got["save"]["gcs_over_local"]["median"] == pytest.approx(15.0)
    assert got["restore"]["gcs_over_local"]["median"] == pytest.approx(30.0)
    assert (got["save"]["gcs_over_local"]["low"], got["save"]["gcs_over_local"]["high"]) == (
        pytest.approx(10.0),
        pytest.approx(20.0),
    )
    assert got["gcs_requests"] == {"save": 42, "restore": 38}
    text = report({"figures": got})
    assert "save gs:// / local: 15.0x [10.0, 20.0]" in text, text


@pytest.mark.parametrize("path", sorted(RESULTS.glob("checkpoint-store-*.json")), ids=str)
def test_recorded_figures_follow_from_their_raw_timings(path: Path):
    doc = json.loads(path.read_text())
    raw = {"times": doc["raw_s"], "bytes": doc["figures"]["checkpoint_bytes"],
           "requests": doc["raw_gcs_requests"]}  # fmt: skip
    assert figures(raw) == doc["figures"], f"{path.name}: figures differ from its raw timings"
    assert doc["figures"]["save"]["gcs_s"]["n"] == doc["repeats"]
