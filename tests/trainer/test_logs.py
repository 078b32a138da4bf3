"""Structured log lines, and the progress bar on a terminal."""

from __future__ import annotations

import io
import json

import numpy as np

from trainer.logs import Log


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_json_lines_in_pods():
    out = io.StringIO()
    log = Log(3, out)
    log.event("progress", step=np.int64(5), loss=0.5)
    log.event("checkpoint", step=8)
    records = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [r["event"] for r in records] == ["progress", "checkpoint"]
    assert records[0]["worker"] == 3 and records[0]["step"] == 5


def test_progress_bar_on_a_terminal():
    out = _Tty()
    log = Log(0, out)
    log.event("progress", step=10, total_steps=20, epoch=0, loss=0.25, accuracy=0.5)
    log.event("done", step=20)
    text = out.getvalue()
    assert text.startswith("\r[" + "=" * 15 + "." * 15 + "] 10/20")
    assert json.loads(text.split("\n")[1])["event"] == "done"
