"""How often the rescue copy (:mod:`trainer.rescue`) is taken, and whether it is kept at all.

The copy grows with the model, so it follows every ``k``-th call, ``k`` the smallest that keeps
its share of training time under :data:`MAX_SHARE` (:func:`smallest_k`), and is not kept past
``--rescue-memory-fraction`` of the memory limit. Survivors must hold the same state, so the
workers agree on ``k`` through each call's all-reduce (the largest proposal) rather than each
deciding from its own timings. Details: docs/trainer.md, "Rescue checkpoints". Imports no
TensorFlow.
"""

from __future__ import annotations

import math
import os
import statistics
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

MAX_SHARE = 0.01
"""The rescue copy's largest share of the training calls' time."""
WINDOW = 8
"""Calls and copies the proposal's medians are taken over (the latest ones: the load moves)."""
CGROUP_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")
"""Where a container's memory limit is read (cgroup v2, then v1)."""


def smallest_k(copy_s: float, call_s: float, share: float = MAX_SHARE) -> int:
    """The smallest ``k >= 1`` with ``copy_s / (k x call_s) <= share``."""
    if copy_s <= 0:
        return 1
    if call_s <= 0:
        raise ValueError(f"call time: must be > 0; got {call_s}")
    # The tolerance keeps an exact boundary (copy = share x k x call) at k, not k + 1.
    return max(1, math.ceil(copy_s / (share * call_s) * (1 - 1e-9)))


def physical_memory() -> int:
    """The machine's memory in bytes."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def memory_limit(paths: Sequence[str] = CGROUP_LIMITS) -> tuple[int, str]:
    """The memory this process may use, in bytes, and where that figure comes from: the
    container's cgroup limit, else (none set, or unreadable) the machine's memory."""
    machine = physical_memory()
    for path in paths:
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and 0 < int(text) < machine:  # v1 writes a huge number for none
            return int(text), path
    return machine, "the machine's memory"


@dataclass(frozen=True)
class Budget:
    """Whether a copy of ``copy_bytes`` is kept within ``fraction`` of ``limit`` bytes."""

    copy_bytes: int
    fraction: float
    limit: int
    source: str

    @property
    def budget(self) -> int:
        return int(self.fraction * self.limit)

    @property
    def kept(self) -> bool:
        return self.copy_bytes <= self.budget

    def fields(self) -> dict[str, object]:
        """The start's ``rescue_copy`` event: the decision and its figures."""
        reason = (
            f"the copy fits --rescue-memory-fraction {self.fraction:g} of {self.source}"
            if self.kept
            else f"the copy ({self.copy_bytes:,} bytes) exceeds --rescue-memory-fraction "
            f"{self.fraction:g} of {self.source} ({self.budget:,} of {self.limit:,} bytes): no "
            "rescue copy; a lost peer resumes from the last periodic checkpoint"
        )
        return {"kept": self.kept, "bytes": self.copy_bytes, "budget_bytes": self.budget,
                "max_share": MAX_SHARE, "reason": reason}  # fmt: skip


class Cadence:
    """One worker's side of the agreement on which calls the copy follows.

    Before each call :meth:`proposals` gives the slots this worker adds to the call's
    all-reduce; after it :meth:`agree` takes the summed slots and says whether to copy now.
    """

    def __init__(
        self, task_index: int, num_workers: int, replicas_per_worker: int, kept: bool = True
    ) -> None:
        self.task_index = task_index
        self.num_workers = num_workers
        self.replicas_per_worker = replicas_per_worker
        self.kept = kept
        self.calls: deque[float] = deque(maxlen=WINDOW)
        self.copies: deque[float] = deque(maxlen=WINDOW)
        self.since = 0
        """Calls since the last copy (equal on every worker)."""
        self.k = 1
        """The agreed ``k`` of the last call."""

    def record_call(self, seconds: float) -> None:
        self.calls.append(seconds)

    def record_copy(self, seconds: float) -> None:
        self.copies.append(seconds)

    def proposal(self) -> int:
        """This worker's ``k``: 1 until it has timed a copy and a call; 0 without a copy."""
        if not self.kept:
            return 0
        if not self.calls or not self.copies:
            return 1
        return smallest_k(statistics.median(self.copies), statistics.median(self.calls))

    def proposals(self) -> list[float]:
        """One slot per worker, this worker's proposal in its own, zeros elsewhere."""
        slots = [0.0] * self.num_workers
        slots[self.task_index] = float(self.proposal())
        return slots

    def agree(self, summed: Sequence[float]) -> bool:
        """Whether to copy after the call whose all-reduce summed the workers' ``slots``
        (each once per replica: every replica of a worker adds its worker's slots). Without
        slots (a task that does not carry them) every call is copied after."""
        if summed:
            # Whole numbers below 2**24 sum exactly in float32, in any order.
            top = max(summed) / self.replicas_per_worker
            self.k = max(1, math.ceil(top - 1e-6))
        else:
            self.k = 1
        self.since += 1
        if self.since < self.k:
            return False
        self.since = 0
        return True
