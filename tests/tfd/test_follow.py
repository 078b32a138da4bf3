"""Durations, log timestamps and the worker prefix of ``tfd logs`` (tfd.follow)."""

from __future__ import annotations

import json

import pytest

from tfd.errors import UsageError
from tfd.follow import parse_duration, prefixed, split_line, timestamp


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 90), ("90s", 90), ("5m", 300), ("2h", 7200), ("1h30m", 5400), ("1d", 86400),
     ("1h0m5s", 3605)],
)  # fmt: skip
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text, "--since") == seconds


@pytest.mark.parametrize("text", ["", "5 minutes", "-5m", "0s", "1.5h", "m"])
def test_bad_durations_name_the_flag(text: str) -> None:
    with pytest.raises(UsageError, match=r"^--timeout: must be"):
        parse_duration(text, "--timeout")


def test_timestamps_sort_although_the_kubelet_trims_trailing_zeros() -> None:
    a = timestamp("2026-12-03T12:00:00.9Z")
    b = timestamp("2026-12-03T12:00:00.123456789Z")
    c = timestamp("2026-12-03T12:00:01Z")
    assert b < a < c
    assert timestamp("not a time") == (0.0, 0)


def test_a_line_and_its_prefix() -> None:
    ts, text = split_line('2026-12-03T12:00:00.5Z {"event": "epoch"}')
    assert text == '{"event": "epoch"}'
    assert prefixed(1, text, False, ts) == '[worker 1] {"event": "epoch"}'
    doc = json.loads(prefixed(1, text, True, ts))
    assert doc["worker"] == 1 and doc["line"] == text and doc["ts"] == pytest.approx(ts[0] + 0.5)
