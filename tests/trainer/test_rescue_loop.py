"""Rescue checkpoints in the controller's loop (trainer/controller.py, trainer/rescue.py): what
the copy holds when a peer is lost at an epoch end or while a save is in flight, and what the
restart resumes from. One process as one worker of two, a stand-in task of real variables; the
multi-worker kill -9 is in test_multiworker.py."""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from pathlib import Path

import pytest
import tensorflow as tf

from trainer import checkpoints, contract, restore, signals
from trainer.checkpoints import Progress
from trainer.cli import Config
from trainer.context import WorkerContext
from trainer.controller import Controller, Schedule
from trainer.errors import PeerLostError
from trainer.local_cluster import worker_envs
from trainer.logs import Log
from trainer.metrics import Metrics
from trainer.rescue import Rescue

BATCH = 64
LOSS, ACCURACY = 0.5, 0.75
"""Each call's figures."""
EVAL = (0.25, 0.875)
"""The evaluation's figures (exact in float32, as the checkpoint keeps them)."""


class _Task:
    """The controller's task with real variables: each call adds its steps to ``w``; the epoch's
    figures and the evaluation set what a checkpoint saves of them. ``lose``: ``("eval", step)``
    or ``("train", step)``, the peer is lost in the evaluation at that step or the call after it.
    """

    evaluates = True

    def __init__(self, lose: tuple[str, int] | None = None) -> None:
        self.lose = lose
        self.w = tf.Variable(0.0)
        self.step = tf.Variable(0, dtype=tf.int64)
        self.last_metrics = tf.Variable([0.0, 0.0])
        self.last_eval = tf.Variable([-1.0, -1.0])
        self.tracked = {"w": self.w, "step": self.step, "last_metrics": self.last_metrics,
                        "last_eval": self.last_eval}  # fmt: skip
        self.batch_var = tf.Variable(BATCH, dtype=tf.int64)
        self.checkpoint = tf.train.Checkpoint(
            **self.tracked, **{checkpoints.GLOBAL_BATCH_KEY: self.batch_var}
        )
        self.at = 0

    def _lost(self, where: str) -> None:
        if self.lose == (where, self.at):
            self.w.assign(-1.0)  # part-way through a step
            raise tf.errors.UnavailableError(None, None, "task 1 stopped sending heartbeats")

    def train(self, steps: int, flags: Sequence[bool]) -> Sequence[float]:
        self._lost("train")
        self.w.assign_add(float(steps))
        self.at += steps
        count = float(steps * BATCH)
        return [LOSS * count, ACCURACY * count, count, 0.0, 0.0, 0.0]

    def end_epoch(self, loss: float, accuracy: float) -> None:
        self.last_metrics.assign([loss, accuracy])

    def evaluate(self) -> tuple[float, float]:
        self._lost("eval")
        self.last_eval.assign(EVAL)
        return EVAL


def _run(
    root: Path, task_index: int, schedule: Schedule, task: _Task, config: Config | None = None
) -> tuple[int, list[dict]]:
    """One worker of two from where the checkpoints on disk leave it: restore, train; returns
    the step it reached (-1: it lost its peer) and its events."""
    env = worker_envs(2, str(root))[task_index]
    stream = io.StringIO()
    ctx = WorkerContext(config or Config(), env, contract.cluster_spec_from_env(env), str(root),
                        Log(task_index, stream), Metrics(), signals.StopSignal())  # fmt: skip
    start, _ = restore.restore(str(root), task.tracked, task.step, task.batch_var,
                                   schedule.total_steps, ctx.config, ctx.log,
                                   ctx.metrics)  # fmt: skip
    task.at = start
    manager, temp_dir = checkpoints.manager(task.checkpoint, str(root), ctx.is_chief, task_index)
    rescue = Rescue(task.checkpoint, task.step, str(root), task_index, start, ctx.log,
                    Progress(BATCH), ctx.config.rescue_memory_fraction)  # fmt: skip
    controller = Controller(ctx, schedule, manager, task.step, temp_dir, rescue=rescue)
    try:
        reached, _ = controller.train(task, start)
    except PeerLostError:
        reached = -1
    return reached, [json.loads(line) for line in stream.getvalue().splitlines()]


def _events(events: list[dict], name: str) -> list[dict]:
    return [e for e in events if e["event"] == name]


@pytest.mark.parametrize(
    ("epochs", "lost_in_eval_at", "rescued"),
    [(1, 4, 2), (2, 4, 2)],
    ids=["the-last-evaluation", "an-epoch-end-evaluation"],
)
def test_a_peer_lost_in_an_evaluation_leaves_a_rescue_that_redoes_it(
    tmp_path: Path, epochs: int, lost_in_eval_at: int, rescued: int
):
    """Epochs of 4 steps, calls of 2, no periodic checkpoint but the epoch ends'."""
    schedule = Schedule(32, 1, 2, steps_per_epoch=4, epochs=epochs, steps_per_call=2,
                        checkpoint_every=1000)  # fmt: skip
    reached, events = _run(tmp_path, 0, schedule, _Task(lose=("eval", lost_in_eval_at)))
    [rescue] = _events(events, "rescue") or [None]
    assert reached == -1 and rescue is not None, events
    # The copy at the epoch end was taken before its figures and evaluation: not a state to
    # resume from. The one before it is: the restart redoes the last call and the evaluation.
    assert rescue["step"] == rescued, f"rescued step {rescue['step']}: {rescue}"
    task = _Task()
    reached, events = _run(tmp_path, 0, schedule, task)
    assert reached == schedule.total_steps, events
    assert _events(events, "resume")[0]["checkpoint"] == rescue["path"], events
    assert [e["epoch"] for e in _events(events, "eval")] == list(range(epochs)), events
    figures = task.last_metrics.numpy().tolist(), task.last_eval.numpy().tolist()
    assert figures == ([LOSS, ACCURACY], list(EVAL)), f"summary figures {figures}"
    assert task.w.numpy() == schedule.total_steps, "not the weights of an undisturbed run"


def test_a_rescue_at_an_epoch_end_carries_its_figures_and_evaluation(tmp_path: Path):
    """The epoch end's save is in flight when the chief is lost (worker 1 survives): the
    rescue of that step must hold the epoch's figures and its evaluation."""
    schedule = Schedule(32, 1, 2, steps_per_epoch=4, epochs=2, steps_per_call=2,
                        checkpoint_every=1000)  # fmt: skip
    reached, events = _run(tmp_path, 1, schedule, _Task(lose=("train", 4)))
    [rescue] = _events(events, "rescue") or [None]
    assert reached == -1 and rescue is not None and rescue["step"] == 4, events
    task = _Task()
    weights, step = tf.Variable(0.0), tf.Variable(0, dtype=tf.int64)
    ckpt = tf.train.Checkpoint(w=weights, step=step, last_metrics=task.last_metrics,
                               last_eval=task.last_eval)  # fmt: skip
    ckpt.restore(rescue["path"]).expect_partial()
    figures = task.last_metrics.numpy().tolist(), task.last_eval.numpy().tolist()
    assert figures == ([LOSS, ACCURACY], list(EVAL)), f"rescue of step 4 holds {figures}"


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
def test_a_save_that_has_not_landed_leaves_the_rescue_to_do(tmp_path: Path, sync: bool):
    """Worker 1 took part in the save of step 4 (its own copy landed); the chief, whose file it
    is, was lost before its write landed: the chief's directory holds nothing after step 0. The
    survivor's rescue of step 4 is all the restart has."""
    schedule = Schedule(32, 1, 2, steps_per_epoch=8, epochs=1, steps_per_call=2,
                        checkpoint_every=4)  # fmt: skip
    config = Config(sync_checkpoints=sync)
    reached, events = _run(tmp_path, 1, schedule, _Task(lose=("train", 4)), config)
    assert reached == -1, events
    rescues = _events(events, "rescue")
    assert [e["step"] for e in rescues] == [4], f"rescues {rescues}: the restart resumes at 0"
    task = _Task()
    _, events = _run(tmp_path, 0, schedule, task)
    assert _events(events, "resume")[0]["step"] == 4, events


class _Peer(_Task):
    """Worker 0 of two whose all-reduce adds worker 1's rescue proposal ``peer_k`` to its
    own; ``sent``: the flags worker 0 gave each call."""

    def __init__(self, peer_k: int, lose: tuple[str, int] | None = None) -> None:
        super().__init__(lose)
        self.peer_k = peer_k
        self.sent: list[list[float]] = []

    def train(self, steps: int, flags: Sequence[bool]) -> Sequence[float]:
        self.sent.append([float(f) for f in flags])
        out = super().train(steps, flags)
        slots = [float(f) for f in flags[2:]]
        slots[1] += self.peer_k
        return [*out, *slots]


@pytest.mark.parametrize(
    ("peer_k", "fraction", "rescued"),
    [(1, 1.0, 16), (3, 1.0, 12), (5, 1.0, 10), (1, 1e-12, None)],
    ids=["every-call", "every-3rd", "every-5th", "over-the-memory-budget"],
)
def test_the_copy_follows_the_calls_the_workers_agreed_on(
    tmp_path: Path, monkeypatch, peer_k: int, fraction: float, rescued: int | None
):
    """Calls of 2 steps, the peer lost in the call from step 16 (the 9th). Worker 0's own
    copies are timed as free (its proposal: every call); its peer proposes every ``peer_k``-th
    call, and the larger one is agreed: the rescue holds the last call copied after. Over the
    memory budget there is no copy and nothing to write."""
    real = Rescue.snapshot
    monkeypatch.setattr(Rescue, "snapshot", lambda self, step: real(self, step) * 0.0)
    schedule = Schedule(32, 1, 2, steps_per_epoch=100, epochs=1, steps_per_call=2,
                        checkpoint_every=1000)  # fmt: skip
    task = _Peer(peer_k, lose=("train", 16))
    reached, events = _run(tmp_path, 0, schedule, task, Config(rescue_memory_fraction=fraction))
    assert reached == -1, events
    assert [e["step"] for e in _events(events, "rescue")] == ([rescued] if rescued else []), (
        f"agreed every {peer_k}: {_events(events, 'rescue')}"
    )
    own = [flags[2:] for flags in task.sent]
    assert all(slots[1] == 0 for slots in own), f"worker 0 filled its peer's slot: {own}"
    assert all(slots[0] == (1 if rescued else 0) for slots in own), f"its proposals: {own}"
    [start] = _events(events, "rescue_copy")[:1] or [None]
    assert start is not None and start["kept"] is bool(rescued), events
