"""The workers' log lines, read back: one JSON object per line (``trainer.logs.Log``).

Each line the trainer writes on a pod is ``{"ts": ..., "event": ..., "worker": ..., ...}``;
TensorFlow's own messages and the one-line errors of ``trainer.cli`` (``trainer: error: ...``)
are plain text on the same stream. :func:`parse_line` keeps both: a plain line becomes a
``text`` record, so a failure's cause is still found.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from trainer.contract.events import (
    DONE_EVENTS,
    ERROR_PREFIX,
    FORMING_EVENTS,
    RESTART_EVENTS,
    TRAINING_EVENTS,
    Event,
)

TEXT = "text"
"""The event of a line that is not a JSON object."""


def parse_line(line: str) -> dict[str, Any] | None:
    """One log line as a record; ``None`` for an empty line.

    A JSON object with an ``event`` is returned as it is; anything else is
    ``{"event": "text", "text": <the line>}``.
    """
    text = line.strip()
    if not text:
        return None
    if text.startswith("{"):
        try:
            doc = json.loads(text)
        except ValueError:
            doc = None
        if isinstance(doc, dict) and isinstance(doc.get("event"), str):
            return doc
    return {"event": TEXT, "text": text}


def parse_lines(lines: Iterable[str]) -> list[dict[str, Any]]:
    return [r for r in (parse_line(line) for line in lines) if r is not None]


def error_of(records: Sequence[dict[str, Any]]) -> str | None:
    """The last ``trainer: error:`` line (its message), else the last ``supervisor_exit``
    reason; ``None`` when neither is there."""
    for record in reversed(records):
        if record["event"] == TEXT and record["text"].startswith(ERROR_PREFIX):
            return record["text"][len(ERROR_PREFIX) :]
        if record["event"] == Event.SUPERVISOR_EXIT and record.get("reason"):
            return str(record["reason"])
    return None


@dataclass
class WorkerLog:
    """What one worker's lines (its current container, oldest first) say.

    Attributes:
        worker: the worker's ordinal.
        records: the parsed lines.
        previous: the lines of its previous container instance (after a restart), if read.
    """

    worker: int
    records: list[dict[str, Any]] = field(default_factory=list)
    previous: list[dict[str, Any]] = field(default_factory=list)

    def last(self, events: Iterable[str]) -> dict[str, Any] | None:
        wanted = frozenset(events)
        for record in reversed(self.records):
            if record["event"] in wanted:
                return record
        return None

    def state(self) -> str | None:
        """``training``, ``forming``, ``restarting`` or ``done``: the last of those kinds of
        events in the current container; ``None`` without any."""
        for record in reversed(self.records):
            event = record["event"]
            if event in DONE_EVENTS:
                return "done"
            if event in TRAINING_EVENTS:
                return "training"
            if event in RESTART_EVENTS:
                return "restarting"
            if event in FORMING_EVENTS:
                return "forming"
        return None

    def supervisor_restarts(self) -> int:
        """In-place restarts of the trainer by the supervisor in this container."""
        counts = [int(r.get("restarts", 0)) for r in self.records if r["event"] == Event.RESTART]
        return max(counts, default=0)

    def error(self) -> str | None:
        return error_of(self.records) or error_of(self.previous)
