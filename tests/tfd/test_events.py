"""The workers' log lines read back (tfd.events), written by the trainer's own ``Log``."""

from __future__ import annotations

import pytest

from tests.tfd.builders import START, progress, worker_log
from tfd.events import TEXT, parse_line


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('{"ts": 1.5, "event": "epoch", "worker": 0, "epoch": 1}',
         {"ts": 1.5, "event": "epoch", "worker": 0, "epoch": 1}),
        ("trainer: error: --dataset x: no such file",
         {"event": TEXT, "text": "trainer: error: --dataset x: no such file"}),
        ("2026-12-03 12:00:00.1: W tensorflow/core/...: cuInit failed",
         {"event": TEXT, "text": "2026-12-03 12:00:00.1: W tensorflow/core/...: cuInit failed"}),
        ('{"no": "event"}', {"event": TEXT, "text": '{"no": "event"}'}),
        ('{"event": "cut short', {"event": TEXT, "text": '{"event": "cut short'}),
        ("   ", None),
    ],
    ids=["event", "trainer error", "tensorflow text", "json without event", "broken json",
         "blank"],
)  # fmt: skip
def test_parse_line(line: str, expected: dict | None) -> None:
    assert parse_line(line) == expected


def test_the_trainers_own_lines_parse_back() -> None:
    log = worker_log(1, START, progress(7))
    assert [r["event"] for r in log.records] == ["start", "progress"]
    assert log.records[1]["worker"] == 1 and log.records[1]["step"] == 7


@pytest.mark.parametrize(
    ("events", "state"),
    [
        ((), None),
        ((("forming", {"workers": 2}),), "forming"),
        ((START, progress(5)), "training"),
        ((START, progress(5), ("stop", {"step": 5, "reason": "rollout"})), "restarting"),
        ((START, progress(5), ("restart", {"code": 76, "restarts": 1})), "restarting"),
        ((START, progress(5), ("resume", {"step": 5})), "forming"),
        ((START, progress(300), ("done", {"step": 300})), "done"),
        ((START, ("scaled_to_zero", {"url": "u"})), "done"),
        ((START, progress(5), ("warning", {"message": "slow"})), "training"),
    ],
    ids=["nothing", "forming", "training", "rollout stop", "supervisor restart", "resumed",
         "done", "scaled to zero", "a warning changes nothing"],
)  # fmt: skip
def test_worker_state_is_its_last_telling_event(events: tuple, state: str | None) -> None:
    assert worker_log(0, *events).state() == state


def test_the_error_is_the_trainers_line_else_the_supervisors_reason() -> None:
    failed = worker_log(0, START, text=("trainer: error: diverged: loss is nan at step 40",))
    assert failed.error() == "diverged: loss is nan at step 40"
    earlier = worker_log(0, previous=("trainer: error: no space left on /ckpt",))
    assert earlier.error() == "no space left on /ckpt"
    hot = worker_log(0, ("supervisor_exit", {"code": 76, "reason": "hot loop"}))
    assert hot.error() == "hot loop"
    assert worker_log(0, START).error() is None


def test_supervisor_restarts_is_the_highest_count_logged() -> None:
    log = worker_log(0, ("restart", {"code": 76, "restarts": 1}),
                     ("restart", {"code": 75, "restarts": 2}))  # fmt: skip
    assert log.supervisor_restarts() == 2
