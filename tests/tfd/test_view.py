"""What the commands print (tfd.view): durations, status lines, JSON lines per change."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from tfd.phase import RunStatus
from tfd.view import StatusView, duration, status_lines

TRAINING = RunStatus(
    "training",
    run_id="r1",
    workers_ready=2,
    workers_desired=2,
    restarts=1,
    step=1200,
    total_steps=3000,
    epoch=4,
    loss=0.1234,
    accuracy=0.9876,
    examples_per_sec=41.2,
    eta_s=372,
    events=["worker 1: restart (exit 75)"],
)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(None, "-"), (0, "0 s"), (42.4, "42 s"), (372, "6 min 12 s"), (7500, "2 h 05 min")],
)
def test_durations(seconds: float | None, text: str) -> None:
    assert duration(seconds) == text


def test_status_lines_for_people() -> None:
    assert status_lines(TRAINING) == [
        "training",
        "run r1   workers 2/2 ready   restarts 1",
        "step 1,200/3,000   epoch 4   loss 0.1234   accuracy 0.988   41 examples/s   "
        "ETA 6 min 12 s",
        "last events:",
        "  worker 1: restart (exit 75)",
    ]
    pending = RunStatus("pending", "worker 0 not scheduled: 0/2 nodes are available")
    assert status_lines(pending)[0] == "pending: worker 0 not scheduled: 0/2 nodes are available"


def test_json_view_prints_a_line_per_change_only(capsys: pytest.CaptureFixture[str]) -> None:
    view = StatusView(as_json=True)
    for st in (TRAINING, TRAINING, RunStatus("done", run_id="r1")):
        view.show(st)
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [d["phase"] for d in lines] == ["training", "done"]
    assert lines[0]["step"] == 1200 and lines[0]["eta_s"] == 372


def test_a_terminal_gets_a_live_bar_with_the_eta() -> None:
    out = io.StringIO()
    view = StatusView(False, Console(file=out, force_terminal=True, width=200))
    view.show(TRAINING)
    view.close()
    text = out.getvalue()
    assert "step 1,200/3,000" in text and "ETA 6 min 12 s" in text, text
