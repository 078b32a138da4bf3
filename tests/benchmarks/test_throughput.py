"""The benchmark's plan and judgement: round order, rows from paired results, verdicts.

Figures here are made up; nothing is timed (speed is judged by ``make bench`` only).
"""

from __future__ import annotations

import pytest

from benchmarks.runs import QUICK, BenchConfig
from benchmarks.throughput import (
    EXTRA,
    ROWS,
    TARGET_DEAD_PEER_S,
    VARIANTS,
    plan,
    report,
    row_figures,
    verdicts,
)
from trainer.errors import EXIT_PEER_LOST


def test_every_row_compares_planned_variants():
    for row in ROWS:
        assert {row.numerator, row.denominator} <= VARIANTS.keys(), row


@pytest.mark.parametrize(("pairs", "extra"), [(10, 3), (1, 1), (4, 0)])
def test_plan_alternates_order_and_limits_extra_variants(pairs: int, extra: int):
    rounds = plan(BenchConfig(pairs=pairs, extra_pairs=extra))
    assert len(rounds) == pairs
    base = [n for n in VARIANTS if n not in EXTRA]
    for i, names in enumerate(rounds):
        expected = list(VARIANTS) if i < extra else base
        assert names == (expected if i % 2 == 0 else expected[::-1]), f"round {i}: {names}"


def test_default_config_has_at_least_ten_pairs():
    assert BenchConfig().pairs >= 10
    assert QUICK.pairs < BenchConfig().pairs


def _results(rates: dict[str, list[float]], acc: dict[str, float] | None = None) -> list[dict]:
    n = max(len(v) for v in rates.values())
    out = []
    for i in range(n):
        r = {}
        for name, values in rates.items():
            if i < len(values) and values[i] is not None:
                r[name] = {"examples_per_sec": values[i], "accuracy": (acc or {}).get(name)}
        out.append(r)
    return out


ROW = {row.key: row for row in ROWS}


def test_row_uses_only_rounds_with_both_sides():
    results = _results({"trainer-fp32": [100, 100, 100, None], "keras-fp32": [100, 200, None, 50]})
    got = row_figures(ROW["trainer_over_keras_fp32"], results)
    assert got["pairs"] == 2 and got["ratios"] == [0.5, 1.0] and got["median"] == 0.75
    assert got["low"] is None, "2 pairs cannot give a 95% interval"


def test_row_with_ten_pairs_has_interval_and_medians():
    trainer = [float(v) for v in range(10, 20)]
    keras = [10.0] * 10
    got = row_figures(ROW["trainer_over_keras_fp32"], _results({"trainer-fp32": trainer,
                                                               "keras-fp32": keras}))  # fmt: skip
    assert (got["pairs"], got["median"], got["low"], got["high"]) == (10, 1.45, 1.1, 1.8)
    assert got["numerator_median_examples_per_sec"] == 14.5
    assert got["denominator_median_examples_per_sec"] == 10.0


def test_row_without_pairs_has_no_figure():
    got = row_figures(ROW["mwms_over_default"], _results({"trainer-fp32": [1.0]}))
    assert got["pairs"] == 0 and "median" not in got


def _figures(rates: dict[str, list[float]], acc: dict[str, float], dead: list[dict]) -> dict:
    results = _results(rates, acc)
    return {"rows": [row_figures(row, results) for row in ROWS], "dead_peer": dead}


TEN = 10


@pytest.mark.parametrize(
    ("rates", "acc", "labels"),
    [
        # trainer = keras, bf16 twice as fast at equal accuracy: every target met.
        (
            {"trainer-fp32": [100.0] * TEN, "keras-fp32": [100.0] * TEN,
             "trainer-bf16": [200.0] * TEN, "keras-bf16": [200.0] * TEN},
            {"trainer-fp32": 0.99, "trainer-bf16": 0.985},
            ["PASS", "PASS", "PASS"],
        ),
        # Median 0.96 but one pair in the interval's reach at 0.85: the lower end misses.
        (
            {"trainer-fp32": [85.0, 85.0] + [96.0] * 8, "keras-fp32": [100.0] * TEN,
             "trainer-bf16": [200.0] * TEN, "keras-bf16": [200.0] * TEN},
            {"trainer-fp32": 0.99, "trainer-bf16": 0.99},
            ["MISS", "PASS", "PASS"],
        ),
        # bf16 fast enough but 0.02 less accurate: a miss.
        (
            {"trainer-fp32": [100.0] * TEN, "keras-fp32": [100.0] * TEN,
             "trainer-bf16": [170.0] * TEN, "keras-bf16": [170.0] * TEN},
            {"trainer-fp32": 0.99, "trainer-bf16": 0.97},
            ["PASS", "PASS", "MISS"],
        ),
        # bf16 slower than fp32 (emulated): a miss; 5 pairs: no interval, no verdict.
        (
            {"trainer-fp32": [100.0] * 5, "keras-fp32": [100.0] * 5,
             "trainer-bf16": [50.0] * 5, "keras-bf16": [50.0] * 5},
            {"trainer-fp32": 0.99, "trainer-bf16": 0.99},
            ["N/A", "N/A", "MISS"],
        ),
        # No bf16 runs at all.
        (
            {"trainer-fp32": [100.0] * TEN, "keras-fp32": [90.0] * TEN},
            {},
            ["PASS", "N/A", "N/A"],
        ),
    ],
)  # fmt: skip
def test_verdicts(rates, acc, labels):
    assert [v.label for v in verdicts(_figures(rates, acc, []))] == labels


@pytest.mark.parametrize(
    ("dead", "label"),
    [
        ({"all_exited_s": 1.0, "survivor_exit_codes": [EXIT_PEER_LOST]}, "PASS"),
        ({"all_exited_s": TARGET_DEAD_PEER_S + 0.1, "survivor_exit_codes": [EXIT_PEER_LOST]},
         "MISS"),
        ({"all_exited_s": 1.0, "survivor_exit_codes": [EXIT_PEER_LOST, 1]}, "MISS"),
        ({"all_exited_s": None, "survivor_exit_codes": []}, "N/A"),
        # A frozen peer is reported, never judged against the dead-peer target.
        ({"signal": "SIGSTOP", "all_exited_s": 9.0, "survivor_exit_codes": [75]}, None),
    ],
)  # fmt: skip
def test_dead_peer_verdicts(dead: dict, label: str | None):
    run_ = {"workers": 2, "victim": 1, **dead}
    got = [v.label for v in verdicts(_figures({"trainer-fp32": [1.0]}, {}, [run_]))][3:]
    assert got == ([label] if label else []), f"{dead}: {got}"


def test_report_renders_rows_and_verdicts():
    figures = _figures(
        {"trainer-fp32": [100.0] * TEN, "keras-fp32": [100.0] * TEN}, {"trainer-fp32": 0.99}, []
    )
    figures.update(
        config={"examples": 8, "epochs": 1, "batch_size": 4, "steps_per_call": 2, "pairs": TEN},
        machine={"cpus": 2, "hardware": "CPU only", "gpus": 0, "tensorflow": "x",
                 "auto_precision": "fp32", "loadavg_1m_start": 1.0, "loadavg_1m_end": 2.0},
        wall_s=5.0,
        verdicts=[v.__dict__ | {"label": v.label} for v in verdicts(figures)],
    )  # fmt: skip
    text = report(figures)
    assert "trainer 1 worker / plain tf-keras, fp32" in text and "[PASS]" in text, text
    assert "--precision auto -> fp32" in text
