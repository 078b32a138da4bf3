"""The rules both sides apply, at their bounds."""

from __future__ import annotations

import math
import re

import pytest

from trainer import contract
from trainer.contract.rules import Interval

# (rule, value, inside)
BOUNDS = [
    (contract.REPLICAS, 0, False),
    (contract.REPLICAS, 1, True),
    (contract.REPLICAS, 1000, True),
    (contract.REPLICAS, 1001, False),
    (contract.REPLICAS, 2.0, False),  # a count is an int
    (contract.REPLICAS, True, False),  # bool is no number
    (contract.COLLECTIVE_TIMEOUT, -0.001, False),
    (contract.COLLECTIVE_TIMEOUT, 0, True),  # 0 = off
    (contract.COLLECTIVE_TIMEOUT, 86_399.999, True),
    (contract.COLLECTIVE_TIMEOUT, 86_400, False),
    (contract.COLLECTIVE_TIMEOUT, math.nan, False),
    (contract.HEARTBEAT_TIMEOUT, 0, False),
    (contract.HEARTBEAT_TIMEOUT, 0.001, True),
    (contract.HEARTBEAT_TIMEOUT, 86_400, False),
    (contract.HEARTBEAT_TIMEOUT, math.inf, False),
    (contract.HEARTBEAT_TIMEOUT.whole(), 1, True),
    (contract.HEARTBEAT_TIMEOUT.whole(), 2.5, False),
    (contract.HEARTBEAT_TIMEOUT.whole(), 86_399, True),
    (Interval(0), 10**12, True),  # no upper bound
]


@pytest.mark.parametrize(("rule", "value", "inside"), BOUNDS)
def test_interval_bounds(rule: Interval, value: object, inside: bool):
    assert rule.contains(value) is inside, f"{rule.text}: {value!r}"


@pytest.mark.parametrize(
    ("rule", "text"),
    [
        (contract.REPLICAS, "an integer in [1, 1000]"),
        (contract.COLLECTIVE_TIMEOUT, "a number of seconds in [0, 86400), 0 = off"),
        (contract.HEARTBEAT_TIMEOUT, "a number of seconds in (0, 86400)"),
        (contract.HEARTBEAT_TIMEOUT.whole(), "a whole number of seconds in (0, 86400)"),
        (Interval(1), "an integer >= 1"),
        (Interval(0, 0.5, integer=False), "a number in [0, 0.5]"),
        (Interval(0, 10, integer=False, lo_open=True), "a number in (0, 10]"),
    ],
)
def test_interval_text(rule: Interval, text: str):
    assert rule.text == text


@pytest.mark.parametrize(
    ("rule", "text", "value"),
    [
        (contract.REPLICAS, "1000", 1000),
        (contract.REPLICAS, " 3 ", 3),
        (contract.HEARTBEAT_TIMEOUT, "0.5", 0.5),
        (contract.COLLECTIVE_TIMEOUT, "0", 0.0),
    ],
)
def test_interval_parse(rule: Interval, text: str, value: float):
    assert rule.parse(text) == value


@pytest.mark.parametrize(
    ("rule", "text"),
    [
        (contract.REPLICAS, "1001"),
        (contract.REPLICAS, "2.0"),
        (contract.REPLICAS, "two"),
        (contract.HEARTBEAT_TIMEOUT, "0"),
        (contract.HEARTBEAT_TIMEOUT, "nan"),
        (contract.COLLECTIVE_TIMEOUT, "86400"),
    ],
)
def test_interval_parse_refuses_with_the_rule(rule: Interval, text: str):
    with pytest.raises(ValueError, match=f"^{re.escape(rule.text)}$"):
        rule.parse(text)


@pytest.mark.parametrize(
    ("run_id", "valid"),
    [
        ("1", True),
        ("run-7", True),
        ("Run_2", True),
        ("2026-12-01.a_b", True),
        ("r" * 63, True),
        ("r" * 64, False),
        ("", False),
        ("-bad", False),
        ("bad_", False),
        ("a/b", False),
        ("a b", False),
    ],
)
def test_run_id_rule(run_id: str, valid: bool):
    assert bool(contract.RUN_ID.match(run_id)) is valid, run_id


def test_pods_never_exit_when_done():
    """A pod's container that exits is restarted (``restartPolicy: Always``) into a loop."""
    assert contract.ON_DONE_EXIT in contract.ON_DONE_MODES
    assert contract.ON_DONE_EXIT not in contract.ON_DONE_POD_MODES
    assert set(contract.ON_DONE_POD_MODES) < set(contract.ON_DONE_MODES)


@pytest.mark.parametrize(
    ("location", "refused"),
    [
        ("/checkpoints/tf-distributed/dev/1", None),
        ("runs/r1", None),
        ("gs://bucket/tfd/r1", None),
        ("synthetic", None),
        ("s3://bucket/tfd/r1", "s3:// is not supported: TensorFlow 2.21 has no S3 filesystem"),
        ("S3://bucket/tfd", "s3:// is not supported"),
        ("hdfs://nn/tfd", "hdfs:// is not a filesystem the trainer has"),
    ],
)
def test_storage_the_trainer_reads_and_writes(location: str, refused: str | None):
    why = contract.storage_problem(location)
    if refused is None:
        assert why is None, f"{location!r} refused: {why}"
    else:
        assert why is not None and why.startswith(refused), f"{location!r}: {why}"
        assert "\n" not in why
