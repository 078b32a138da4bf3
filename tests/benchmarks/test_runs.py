"""Parsing what ``python -m trainer.local`` printed: events, summary, first-step and
checkpoint figures. Nothing here times anything."""

from __future__ import annotations

import json

import pytest

from benchmarks.roofline import BenchmarkError
from benchmarks.runs import checkpoint_figures, first_step_figures, parse_local_output


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


@pytest.mark.parametrize("name", ["tfd-bench-1w-k2lrm9n_", "tfd-bench-1w-abc", "x-."])
def test_a_jobs_run_id_is_valid_whatever_the_temporary_name(name: str, tmp_path) -> None:
    # The launcher takes the run id from the checkpoint directory's last segment; a temporary
    # name ending in "_" once failed a benchmark after 15 minutes of runs.
    from pathlib import Path

    from benchmarks.runs import run_dir
    from trainer import contract

    run_id = Path(run_dir(str(tmp_path / name))).name
    assert contract.RUN_ID.match(run_id), run_id
