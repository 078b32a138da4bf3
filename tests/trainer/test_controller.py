"""The controller's schedule: each call's length, the saves, and the plan from the data."""

from __future__ import annotations

import pytest

from trainer.config import Config
from trainer.controller import Schedule, plan
from trainer.errors import DataError

# 2 epochs of 10 steps, 4 steps per call, a checkpoint every 6 steps.
SCHEDULE = Schedule(32, 1, 2, steps_per_epoch=10, epochs=2, steps_per_call=4, checkpoint_every=6)


@pytest.mark.parametrize(
    ("step", "steps", "why"),
    [
        (0, 4, "--steps-per-call"),
        (4, 2, "the checkpoint at 6"),
        (6, 4, "the epoch end at 10"),
        (8, 2, "the epoch end at 10"),
        (10, 2, "the checkpoint at 12"),
        (16, 2, "the checkpoint at 18"),
        (18, 2, "the last step, 20"),
    ],
)
def test_a_call_never_crosses_a_checkpoint_an_epoch_end_or_the_end(step: int, steps: int, why: str):
    assert SCHEDULE.call_steps(step) == steps, f"from step {step}: cut at {why}"


def test_saves_and_epochs_along_the_run():
    steps, step = [], 0
    while step < SCHEDULE.total_steps:
        step += SCHEDULE.call_steps(step)
        steps.append(step)
    assert steps == [4, 6, 10, 12, 16, 18, 20]
    assert [s for s in steps if SCHEDULE.save_due(s)] == [6, 10, 12, 18, 20]
    assert [s for s in steps if SCHEDULE.epoch_end(s)] == [10, 20]
    assert [SCHEDULE.epoch(s) for s in (9, 10, 20)] == [0, 1, 1]


@pytest.mark.parametrize(
    ("flags", "replicas_per_worker", "workers", "global_batch", "steps_per_epoch"),
    [
        ({"batch_size": 32}, 1, 1, 32, 32),
        ({"batch_size": 32}, 2, 1, 64, 16),
        ({"batch_size": 32}, 2, 2, 128, 8),
        ({"batch_size": 32, "steps_per_epoch": 100}, 2, 2, 128, 100),  # kept as given
    ],
)
def test_plan_from_the_examples(
    flags: dict, replicas_per_worker: int, workers: int, global_batch: int, steps_per_epoch: int
):
    got = plan(Config(**flags), 1024, replicas_per_worker, workers)
    assert (got.global_batch, got.steps_per_epoch) == (global_batch, steps_per_epoch), got
    assert got.total_steps == 3 * steps_per_epoch  # --epochs' default


def test_plan_refuses_data_without_a_global_batch():
    with pytest.raises(DataError) as info:
        plan(Config(batch_size=32), 100, 2, 2)
    assert str(info.value) == (
        "--dataset synthetic: 100 examples give no full global batch of 128 (--batch-size 32 "
        "x 4 replicas)"
    )
