"""The benchmark's pure helpers: FLOP counting, launcher-output parsing, ratios and verdicts.

Nothing here times anything; the benchmark itself prints its figures.
"""

from __future__ import annotations

import json

import pytest

from benchmarks.roofline import (
    BenchmarkError,
    analytic_forward_flops,
    matmul_peak_gflops,
    profiled_forward_flops,
)
from benchmarks.throughput import (
    TARGET_DEAD_PEER_S,
    best_run,
    checkpoint_figures,
    first_step_figures,
    parse_local_output,
    ratios,
    verdicts,
)
from trainer.errors import EXIT_PEER_LOST


@pytest.mark.parametrize(
    ("input_shape", "num_classes"),
    [((28, 28, 1), 10), ((32, 32, 3), 5)],
)
def test_analytic_flops_equal_profiler_for_default_cnn(input_shape, num_classes):
    from trainer import model

    net = model.build("", input_shape, num_classes)
    analytic = analytic_forward_flops(net)
    profiled = profiled_forward_flops(net, input_shape)
    assert analytic == profiled, (
        f"default CNN {input_shape}->{num_classes}: analytic {analytic} != profiler {profiled}"
    )


def test_analytic_flops_rejects_unknown_layer():
    import tf_keras

    net = tf_keras.Sequential(
        [
            tf_keras.layers.InputLayer(input_shape=(8,)),
            tf_keras.layers.BatchNormalization(name="bn"),
            tf_keras.layers.Dense(2),
        ]
    )
    with pytest.raises(BenchmarkError, match=r"'bn' \(BatchNormalization\): no analytic"):
        analytic_forward_flops(net)


@pytest.mark.parametrize(("n", "chain", "repeats"), [(0, 1, 1), (8, 0, 1), (8, 1, 0)])
def test_matmul_peak_rejects_non_positive_sizes(n, chain, repeats):
    with pytest.raises(BenchmarkError, match="must be >= 1"):
        matmul_peak_gflops(n, chain, repeats)


def _event(worker: int, event: str, ts: float, **fields) -> str:
    return f"[worker-{worker}] " + json.dumps(
        {"ts": ts, "event": event, "worker": worker, **fields}
    )


SUMMARY = {
    "workers": 1,
    "final_step": 64,
    "examples_per_sec": 900.0,
    "exit_code": 0,
    "launch_to_first_step_s": 7.5,
}
LAUNCHER_LINES = [
    "[launcher] starting 1 workers, checkpoints in /tmp/x",
    "[worker-0] 2025-01-01 W tensorflow noise {not json",
    _event(0, "start", 105.0, start_step=0, startup_s=0.8),
    _event(0, "first_step", 107.5, step=16),
    _event(0, "progress", 107.6, step=32),
    _event(0, "checkpoint", 107.7, step=50, seconds=0.25),
    _event(0, "checkpoint", 107.9, step=64, seconds=0.5),
    _event(1, "start", 105.2, start_step=0),
    '{"unrelated": true}',
    json.dumps(SUMMARY),
    "[worker-1] late TensorFlow output after the summary",
]


def test_parse_local_output_splits_events_and_summary():
    out = parse_local_output(LAUNCHER_LINES)
    assert out.summary == SUMMARY
    assert [e["event"] for e in out.events[0]] == [
        "start",
        "first_step",
        "progress",
        "checkpoint",
        "checkpoint",
    ]
    assert [e["event"] for e in out.events[1]] == ["start"]
    assert out.first(0, "progress")["step"] == 32
    assert parse_local_output(LAUNCHER_LINES[:-2]).summary is None


def test_first_step_figures_from_launcher_summary_and_chief_events():
    # The launcher timed first_step (ts 107.5) at 7.5 s: its origin was 100.0.
    figs = first_step_figures(parse_local_output(LAUNCHER_LINES))
    assert figs == {
        "launch_to_start_s": 5.0,
        "launch_to_first_step_s": 7.5,
        "first_call_steps": 16,
        "trainer_startup_s": 0.8,
    }


def test_checkpoint_figures_sum_chief_saves():
    out = parse_local_output(LAUNCHER_LINES)
    assert checkpoint_figures(out) == {"checkpoints": 2, "checkpoint_s_total": 0.75}
    assert checkpoint_figures(out, worker=1) == {"checkpoints": 0, "checkpoint_s_total": 0.0}


@pytest.mark.parametrize(
    "drop",
    ['"event": "first_step"', '"event": "start"', '"launch_to_first_step_s"'],
)
def test_first_step_figures_missing_input_is_an_error(drop: str):
    lines = [line for line in LAUNCHER_LINES if drop not in line]
    if drop.startswith('"launch'):
        lines.append(json.dumps({**SUMMARY, "launch_to_first_step_s": None}))
    with pytest.raises(BenchmarkError, match="worker-0: no 'start' or 'first_step'"):
        first_step_figures(parse_local_output(lines))


def test_best_run_keeps_every_rate():
    runs = [{"examples_per_sec": 10.0, "id": "a"}, {"examples_per_sec": 30.0, "id": "b"}]
    assert best_run(runs) == {
        "examples_per_sec": 30.0,
        "id": "b",
        "examples_per_sec_runs": [10.0, 30.0],
    }
    assert best_run([]) is None


def _figures(keras: float, one: float, dead: list[dict]) -> dict:
    return {
        "keras": {"examples_per_sec": keras},
        "trainer": {"1w": {"examples_per_sec": one}, "2w": {"examples_per_sec": one / 2}},
        "roofline": {"roofline_examples_per_sec": 4 * keras},
        "dead_peer": dead,
    }


@pytest.mark.parametrize(
    ("keras", "one", "dead", "labels"),
    [
        (1000.0, 960.0, [], ["PASS"]),
        (1000.0, 940.0, [], ["MISS"]),
        (
            1000.0,
            1000.0,
            [
                {
                    "workers": 2,
                    "victim": 1,
                    "all_exited_s": 1.0,
                    "survivor_exit_codes": [EXIT_PEER_LOST],
                }
            ],
            ["PASS", "PASS"],
        ),
        (
            1000.0,
            1000.0,
            [
                {
                    "workers": 2,
                    "victim": 1,
                    "all_exited_s": TARGET_DEAD_PEER_S + 0.1,
                    "survivor_exit_codes": [EXIT_PEER_LOST],
                }
            ],
            ["PASS", "MISS"],
        ),
        (
            1000.0,
            1000.0,
            [
                {
                    "workers": 3,
                    "victim": 0,
                    "all_exited_s": 1.0,
                    "survivor_exit_codes": [EXIT_PEER_LOST, 1],
                }
            ],
            ["PASS", "MISS"],
        ),
        (
            1000.0,
            1000.0,
            [{"workers": 2, "victim": 1, "all_exited_s": None, "survivor_exit_codes": []}],
            ["PASS", "N/A"],
        ),
        (
            # A frozen peer is reported, never judged against the dead-peer target.
            1000.0,
            1000.0,
            [
                {
                    "workers": 2,
                    "victim": 1,
                    "signal": "SIGSTOP",
                    "all_exited_s": TARGET_DEAD_PEER_S + 3.0,
                    "survivor_exit_codes": [EXIT_PEER_LOST],
                }
            ],
            ["PASS"],
        ),
    ],
)
def test_verdicts_against_targets(keras, one, dead, labels):
    figures = _figures(keras, one, dead)
    figures["ratios"] = ratios(figures)
    assert [v.label for v in verdicts(figures)] == labels


def test_ratios_skip_missing_runs():
    figures = _figures(1000.0, 500.0, [])
    assert ratios(figures) == {
        "trainer_1w_over_keras": 0.5,
        "trainer_2w_over_1w": 0.5,
        "keras_over_roofline": 0.25,
        "trainer_1w_over_roofline": 0.125,
        "trainer_2w_over_roofline": 0.062,
    }
    figures["keras"] = None
    assert "trainer_1w_over_keras" not in ratios(figures)
    assert verdicts({**figures, "ratios": ratios(figures)})[0].label == "N/A"
