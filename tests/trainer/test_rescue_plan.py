"""The rescue copy's cadence and budget (trainer/rescue_plan.py): the smallest k that keeps the
copy within 1% of the calls' time, the host-memory budget, and that every worker copies after
the same calls whatever it measured itself. Pure Python but the Rescue's budget case."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import tensorflow as tf

from trainer import rescue as rescue_module
from trainer.checkpoints import Progress
from trainer.logs import Log
from trainer.rescue import Rescue
from trainer.rescue_plan import MAX_SHARE, WINDOW, Budget, Cadence, memory_limit, smallest_k


@pytest.mark.parametrize(
    ("copy_s", "call_s", "k"),
    [
        (0.001, 0.100, 1),  # exactly 1%: every call
        (0.001, 0.099, 2),  # just over 1% at k = 1
        (0.0, 0.050, 1),  # a free copy
        (0.010, 0.063, 16),  # 15.9 calls: the next whole one
        (0.500, 0.100, 500),
        (12.0, 2.0, 600),  # 12 GB at 1 GB/s against a 2 s call: a 1B-parameter model
    ],
    ids=["exactly-1pct", "just-over", "free", "rounds-up", "copy-5x-call", "1b-params"],
)
def test_k_is_the_smallest_that_keeps_the_copy_within_1pct(copy_s: float, call_s: float, k: int):
    assert smallest_k(copy_s, call_s) == k, f"copy {copy_s} s, call {call_s} s"
    assert copy_s / (k * call_s) <= MAX_SHARE * (1 + 1e-9), f"k {k} leaves more than 1%"
    if k > 1:
        assert copy_s / ((k - 1) * call_s) > MAX_SHARE, f"k {k - 1} was enough"


@pytest.mark.parametrize(
    ("calls", "copies", "proposal"),
    [
        ([], [], 1),  # nothing timed yet: copy, to time it
        ([0.1], [], 1),
        ([], [0.01], 1),
        ([0.1], [0.005], 5),
        ([0.1, 0.1, 5.0], [0.005, 0.005, 0.5], 5),  # the medians: one disturbed call and copy
        ([5.0] * WINDOW + [0.1] * WINDOW, [0.005] * WINDOW, 5),  # the latest calls only
    ],
    ids=["none", "no-copy", "no-call", "one-each", "median", "window"],
)
def test_a_workers_proposal_is_the_k_of_its_median_copy_and_call(
    calls: list[float], copies: list[float], proposal: int
):
    cadence = Cadence(0, 1, 1)
    for seconds in calls:
        cadence.record_call(seconds)
    for seconds in copies:
        cadence.record_copy(seconds)
    assert cadence.proposal() == proposal, f"calls {calls}, copies {copies}"


@pytest.mark.parametrize(
    ("measured", "replicas", "copied_after"),
    [
        # each worker's (copy s, call s); replicas per worker; the calls (1-based) copied after
        ([(0.001, 0.1), (0.001, 0.1)], 1, [1, 2, 3, 4, 5, 6, 7, 8, 9]),
        ([(0.001, 0.1), (0.003, 0.1)], 1, [1, 2, 5, 8]),  # the slowest copy sets k = 3
        ([(0.003, 0.1), (0.001, 0.1), (0.002, 0.1)], 2, [1, 2, 5, 8]),  # 2 replicas each
        ([(0.002, 0.1), (0.001, 0.05)], 1, [1, 2, 4, 6, 8]),  # k 2 from both
    ],
    ids=["equal", "one-slower", "three-workers-two-replicas", "different-calls-same-k"],
)
def test_every_worker_copies_after_the_same_calls_whatever_it_measured(
    measured: list[tuple[float, float]], replicas: int, copied_after: list[int]
):
    workers = [Cadence(i, len(measured), replicas) for i in range(len(measured))]
    decisions: list[list[int]] = [[] for _ in workers]
    for call in range(1, 10):
        # The call's all-reduce: every replica of every worker adds its worker's slots.
        summed = [replicas * sum(col) for col in zip(*(w.proposals() for w in workers),
                                                        strict=True)]  # fmt: skip
        for w, (copy_s, call_s), mine in zip(workers, measured, decisions, strict=True):
            if call > 1:  # the first call traced: the controller does not time it
                w.record_call(call_s)
            if w.agree(summed):
                mine.append(call)
                w.record_copy(copy_s)
    assert all(d == decisions[0] for d in decisions), f"workers disagree: {decisions}"
    assert decisions[0] == copied_after, f"copied after calls {decisions[0]}"


def test_without_slots_every_call_is_copied_after():
    cadence = Cadence(0, 2, 1)
    assert [cadence.agree([]) for _ in range(3)] == [True] * 3


@pytest.mark.parametrize(
    ("copy_bytes", "fraction", "limit", "kept"),
    [
        (25_000_000, 0.25, 4 << 30, True),  # the built-in CNN in a 4 GiB pod
        (2_400_000_000, 0.25, 8 << 30, False),  # 200M parameters and Adam in an 8 GiB pod
        (2_400_000_000, 0.25, 16 << 30, True),
        (1000, 0.5, 2000, True),  # exactly the budget
        (1001, 0.5, 2000, False),
    ],
    ids=["small-model", "over", "larger-pod", "at-budget", "one-byte-over"],
)
def test_a_copy_over_its_memory_budget_is_not_kept(
    copy_bytes: int, fraction: float, limit: int, kept: bool
):
    budget = Budget(copy_bytes, fraction, limit, "/sys/fs/cgroup/memory.max")
    fields = budget.fields()
    assert (budget.kept, fields["kept"]) == (kept, kept), fields
    assert fields["bytes"] == copy_bytes and fields["budget_bytes"] == int(fraction * limit)
    if not kept:
        assert "--rescue-memory-fraction" in fields["reason"], fields["reason"]
        assert "last periodic checkpoint" in fields["reason"], fields["reason"]


@pytest.mark.parametrize(
    ("v2", "v1", "limit"),
    [("4294967296\n", None, 4 << 30), ("max\n", None, None), (None, "2147483648", 2 << 30),
     (None, str(2**63 - 4096), None), (None, None, None)],
    ids=["cgroup-v2", "v2-no-limit", "cgroup-v1", "v1-no-limit", "no-cgroup"],
)  # fmt: skip
def test_the_memory_limit_is_the_containers_else_the_machines(
    tmp_path: Path, v2: str | None, v1: str | None, limit: int | None
):
    paths = []
    for name, text in (("v2", v2), ("v1", v1)):
        paths.append(str(tmp_path / name))
        if text is not None:
            (tmp_path / name).write_text(text)
    got, source = memory_limit(paths)
    if limit is None:
        assert source == "the machine's memory" and got > 0, (got, source)
    else:
        assert (got, source) in {(limit, paths[0]), (limit, paths[1])}, (got, source)


def test_a_rescue_over_its_budget_holds_no_copy_and_writes_nothing(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(rescue_module, "memory_limit", lambda: (1000, "a 1000-byte pod"))
    weights, step = tf.Variable([0.0] * 100), tf.Variable(0, dtype=tf.int64)  # 408 bytes
    stream = io.StringIO()
    ckpt = tf.train.Checkpoint(w=weights, step=step)
    rescue = Rescue(ckpt, step, str(tmp_path), 1, 0, Log(1, stream), Progress(64), 0.25)
    assert not rescue.kept and rescue.copies == [], rescue.budget
    assert rescue.snapshot(36) == 0.0
    rescue.write()
    assert stream.getvalue() == "" and not (tmp_path / "checkpoints").exists()
    within = Rescue(ckpt, step, str(tmp_path), 1, 0, Log(1, stream), Progress(64), 0.5)
    assert within.kept and len(within.copies) == 2, within.budget
    assert json.loads(json.dumps(within.budget.fields()))["bytes"] == 408
