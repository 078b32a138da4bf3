"""Worker logs: one JSON object per line (pods, pipes), or a progress line on a terminal.

Every line carries ``event`` and ``worker``; ``tfd``, the local launcher and the tests read them
back. The names are ``trainer.contract.Event``'s: a name outside it is refused, so what ``tfd``
reads cannot drift from what is written.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any, TextIO

from trainer.contract.events import Event


class Log:
    """Structured event lines on stdout; on a TTY, ``progress`` redraws one status line."""

    def __init__(self, worker: int | None, stream: TextIO | None = None) -> None:
        """``worker``: the task index, or ``None`` before the worker knows it."""
        self.worker = worker
        self.stream = stream or sys.stdout
        self.tty = self.stream.isatty()
        self._bar_open = False

    def event(self, event: str, **fields: Any) -> None:
        """Write one event; ``progress`` becomes a redrawn bar when writing to a terminal."""
        event = Event(event)  # ValueError for a name outside the contract
        if self.tty and event == "progress":
            self._bar(fields)
            return
        if self._bar_open:
            self.stream.write("\n")
            self._bar_open = False
        record = {"ts": round(time.time(), 3), "event": event, "worker": self.worker, **fields}
        self.stream.write(json.dumps(record, default=_plain) + "\n")
        self.stream.flush()

    def _bar(self, f: dict[str, Any]) -> None:
        total = max(int(f.get("total_steps", 1)), 1)
        step = int(f.get("step", 0))
        filled = int(30 * step / total)
        line = (
            f"\r[{'=' * filled}{'.' * (30 - filled)}] {step}/{total} "
            f"epoch {f.get('epoch', 0)} loss {f.get('loss', 0):.4f} "
            f"acc {f.get('accuracy', 0):.3f} {f.get('examples_per_sec', 0):.0f} ex/s"
        )
        self.stream.write(line)
        self.stream.flush()
        self._bar_open = True


def _plain(value: Any) -> Any:
    """numpy scalars (e.g. int64 steps) are not JSON-serialisable as such."""
    if hasattr(value, "item"):
        return value.item()
    return str(value)
