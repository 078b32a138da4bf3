"""What the commands print: one JSON document (``--json``) or text for people, with ``rich``
(a live progress bar with the ETA for ``--watch`` and ``--follow``)."""

from __future__ import annotations

import json
import sys
from typing import Any, TextIO

from rich import box
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn
from rich.table import Table

from tfd.phase import RunStatus

PHASE_STYLE = {
    "training": "green",
    "done": "bold green",
    "failed": "bold red",
    "stopped": "yellow",
    "pending": "bold yellow",
    "restarting": "magenta",
    "resizing": "magenta",
}


def duration(seconds: float | None) -> str:
    """``42 s``, ``6 min 12 s``, ``2 h 05 min``; ``-`` when unknown."""
    if seconds is None:
        return "-"
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def status_lines(st: RunStatus) -> list[str]:
    """``tfd status`` for people, as plain lines (the console adds colour)."""
    head = f"{st.phase}" + (f": {st.reason}" if st.reason else "")
    lines = [
        head,
        f"run {st.run_id or '-'}   workers {st.workers_ready}/{st.workers_desired} "
        f"ready   restarts {st.restarts}",
    ]
    if st.step is not None:
        total = f"/{st.total_steps:,}" if st.total_steps else ""
        lines.append(
            f"step {st.step:,}{total}   epoch {_num(st.epoch, 'd')}   loss "
            f"{_num(st.loss, '.4f')}   accuracy {_num(st.accuracy, '.3f')}   "
            f"{_num(st.examples_per_sec, ',.0f')} examples/s   ETA {duration(st.eta_s)}"
        )
    if st.events:
        lines.append("last events:")
        lines.extend(f"  {e}" for e in st.events)
    return lines


def _short(value: str | None, keep: int) -> str:
    """A digest or commit cut to ``keep`` characters of its hex (``sha256:`` kept)."""
    if not value:
        return "-"
    prefix, _, rest = value.rpartition(":")
    return f"{prefix}:{rest[:keep]}" if prefix else value[:keep]


def runs_table(doc: dict[str, Any]) -> Table:
    """``tfd runs`` for people: one row per run, newest first; the stack's current run marked
    ``*``. Digests and commits are cut to 12 characters (``--json`` has them whole)."""
    table = Table(
        title=f"runs of stack {doc.get('stack', '-')} ({doc.get('root', '-')})",
        box=box.SIMPLE_HEAD,
    )
    for header in ("run", "state", "step", "accuracy", "started", "duration", "image", "commit"):
        table.add_column(header, justify="right" if header in ("step", "accuracy") else "left")
    for r in doc["runs"]:
        accuracy = r.get("eval_accuracy") if r.get("eval_accuracy") is not None else r["accuracy"]
        style = PHASE_STYLE.get(r["state"], "")
        table.add_row(
            f"{r['run_id']}{' *' if r.get('current') else ''}",
            f"[{style}]{r['state']}[/]" if style else r["state"],
            "-" if r["step"] is None else f"{r['step']:,}",
            _num(accuracy, ".3f"),
            (r["started_utc"] or "-").replace("T", " ").removesuffix("Z"),
            duration(r["duration_s"]),
            _short(r["image_digest"], 12) if r["image_digest"] else (r["image"] or "-"),
            _short(r["source_commit"], 12),
        )
    return table


def runs_lines(doc: dict[str, Any]) -> list[str]:
    """What follows the table: each run's problems (an unreadable record file), and an empty
    listing said in words."""
    lines = [] if doc["runs"] else [f"no runs recorded under {doc.get('root', '-')}"]
    for r in doc["runs"]:
        lines.extend(f"{r['run_id']}: {problem}" for problem in r.get("problems") or [])
    return lines


def print_json(doc: Any, stream: TextIO | None = None) -> None:
    (stream or sys.stdout).write(json.dumps(doc, sort_keys=True) + "\n")
    (stream or sys.stdout).flush()


class StatusView:
    """Prints statuses as they come: JSON lines, or a live bar (a terminal) / changed lines."""

    def __init__(self, as_json: bool, console: Console | None = None) -> None:
        self.as_json = as_json
        self.console = console or Console(highlight=False)
        self._last: tuple[Any, ...] | None = None
        self._progress: Progress | None = None
        self._task: TaskID | None = None

    def show(self, st: RunStatus) -> None:
        key = (st.phase, st.reason, st.step, st.workers_ready, st.restarts)
        if self.as_json:
            if key != self._last:
                print_json(st.to_json())
            self._last = key
            return
        if self.console.is_terminal and st.total_steps:
            self._bar(st)
        elif key != self._last:
            self._line(st)
        self._last = key

    def _line(self, st: RunStatus) -> None:
        style = PHASE_STYLE.get(st.phase, "")
        text = status_lines(st)
        self.console.print(f"[{style}]{text[0]}[/]" if style else text[0], markup=bool(style))
        for line in text[1:3]:
            if not line.startswith("last events"):
                self.console.print(line, markup=False)

    def _bar(self, st: RunStatus) -> None:
        if self._progress is None:
            self._progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("step {task.completed:,.0f}/{task.total:,.0f}"),
                TextColumn("ETA {task.fields[eta]}"),
                TextColumn("{task.fields[detail]}"),
                console=self.console,
            )
            self._progress.start()
            self._task = self._progress.add_task(st.phase, total=st.total_steps, eta="-", detail="")
        assert self._task is not None
        detail = (
            f"loss {_num(st.loss, '.4f')} acc {_num(st.accuracy, '.3f')} "
            f"{_num(st.examples_per_sec, ',.0f')} ex/s  workers "
            f"{st.workers_ready}/{st.workers_desired}  restarts {st.restarts}"
        )
        if st.phase != "training" and st.reason:
            detail += f"  ({st.reason})"
        self._progress.update(
            self._task,
            description=st.phase,
            total=st.total_steps,
            completed=st.step or 0,
            eta=duration(st.eta_s),
            detail=detail,
        )

    def close(self, st: RunStatus | None = None) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
        if st is not None and not self.as_json:
            for line in status_lines(st):
                self.console.print(line, markup=False)
