"""Warm standby processes: a restarted worker runs in a process that imported TensorFlow."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trainer import standby
from trainer.errors import ContractError

IMPORT_ENV = {"TF_CPP_MIN_LOG_LEVEL": "2", "TF_USE_LEGACY_KERAS": "1"}


@pytest.mark.parametrize(
    ("current", "sent", "refused"),
    [
        (IMPORT_ENV | {"OLD_ONLY": "x"}, IMPORT_ENV | {"TFD_POD_NAME": "w-1"}, ""),
        (IMPORT_ENV, {**IMPORT_ENV, "TF_CPP_MIN_LOG_LEVEL": "0"}, "TF_CPP_MIN_LOG_LEVEL"),
        (IMPORT_ENV, {"TF_USE_LEGACY_KERAS": "1"}, "TF_CPP_MIN_LOG_LEVEL"),  # unset is a change
    ],
)
def test_a_standby_takes_the_workers_environment_exactly(current, sent, refused):
    environ = dict(current)
    line = standby.start_line(sent, ["--epochs", "3"])
    if refused:
        with pytest.raises(ContractError, match=f"standby: {refused} differ"):
            standby.adopt(line, environ)
        assert environ == current, "a refused start changed the environment"
        return
    assert standby.adopt(line, environ) == ["--epochs", "3"]
    assert environ == sent, "variables of the standby's own start survived"


def _started_at(pid: int) -> float:
    """The process's start time (``time.time()`` scale) from /proc."""
    ticks = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    boot = next(
        float(line.split()[1])
        for line in Path("/proc/stat").read_text().splitlines()
        if line.startswith("btime ")
    )
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def _until_a_standby_runs(launcher: int, timeout_s: float = 120) -> None:
    """Wait until the launcher has a ``trainer.standby`` child (started once the workers
    train), however long a loaded machine takes to start it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
                cmdline = (stat.parent / "cmdline").read_bytes().split(b"\0")
            except (OSError, ValueError, IndexError):  # the process ended meanwhile
                continue
            if parent == launcher and standby.MODULE.encode() in cmdline:
                return
        time.sleep(0.1)
    raise AssertionError(f"no {standby.MODULE} child of the launcher within {timeout_s} s")


@pytest.mark.slow
def test_a_restarted_worker_runs_in_a_standby_started_before_the_restart(tmp_path: Path):
    """SIGTERM restarts the job; the second attempt's worker is a process that existed (with
    TensorFlow imported) before the launcher restarted, and it resumes and finishes."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainer.local", "--workers", "1", "--restarts", "1", "--standby"]
        + ["--checkpoint-dir", str(tmp_path), "--epochs", "3", "--synthetic-examples", "2048"]
        + ["--batch-size", "16", "--checkpoint-every", "8", "--steps-per-call", "4"]
        + ["--log-every", "0.05"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    starts: list[tuple[int, float]] = []  # (pid, process start time) of each attempt's worker
    restart_t = None
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("[launcher] restarting"):
            restart_t = time.time()
        if line.startswith("[worker-0] {") and '"event": "start"' in line:
            pid = json.loads(line.split("] ", 1)[1])["pid"]
            starts.append((pid, _started_at(pid)))
        if '"event": "progress"' in line and len(starts) == 1 and restart_t is None:
            _until_a_standby_runs(proc.pid)  # a fixed 3 s was too short on a loaded machine
            os.kill(starts[0][0], signal.SIGTERM)
            restart_t = -1.0
    assert proc.wait(timeout=120) == 0, "".join(lines[-30:])
    assert restart_t is not None and restart_t > 0 and len(starts) == 2, "".join(lines[-30:])
    (first_pid, _), (second_pid, second_started) = starts
    assert second_pid != first_pid
    assert second_started < restart_t, (
        f"the restarted worker (pid {second_pid}) started {second_started - restart_t:.2f} s "
        "after the restart: it was not a standby"
    )
    assert any('"event": "resume"' in x for x in lines)
