"""The supervisor (image entrypoint) on a fake trainer: a tiny ``python -c`` child that exits with
the codes given to it, one per start, and records each start with TFD_SUPERVISOR_RESTARTS."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trainer import contract
from trainer.errors import EXIT_PEER_LOST, EXIT_RESTART

FAKE_TRAINER = """
import os, signal, sys, time
log, codes = sys.argv[1], sys.argv[2].split(",")
with open(log, "a") as f:
    restarts = os.environ.get("TFD_SUPERVISOR_RESTARTS", "unset")
    f.write(restarts + " " + " ".join(sys.argv[3:]) + "\\n")
starts = sum(1 for _ in open(log))
code = codes[min(starts, len(codes)) - 1]
if code == "wait":  # a training child: SIGTERM -> exit 76 after checkpointing
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(76))
    signal.signal(signal.SIGINT, lambda *_: sys.exit(76))
    print("ready", flush=True)
    time.sleep(60)
    sys.exit(1)
sys.exit(int(code))
"""


def _supervise(
    tmp_path: Path, codes: str, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    script = tmp_path / "fake_trainer.py"
    script.write_text(FAKE_TRAINER)
    runner = (
        "import sys; from trainer import supervisor; "
        f"s = supervisor.Supervisor(sys.argv[1:], __import__('os').environ, "
        f"supervisor.Limits.from_env(__import__('os').environ), "
        f"command=[sys.executable, {str(script)!r}]); s.install(); sys.exit(s.run())"
    )
    return subprocess.Popen(
        [sys.executable, "-c", runner, str(tmp_path / "starts.log"), codes, "--epochs", "2"],
        env=os.environ | {contract.ENV_SUPERVISOR_PAUSE_SECONDS: "0.05"} | (env or {}),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _starts(tmp_path: Path) -> list[str]:
    return (tmp_path / "starts.log").read_text().splitlines()


def _events(out: str, name: str) -> list[dict[str, object]]:
    docs = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return [d for d in docs if d.get("event") == name]


@pytest.mark.parametrize(
    ("codes", "exit_code", "starts"),
    [
        ("0", 0, 1),  # trained: the container ends with 0
        ("1", 1, 1),  # a real crash: the kubelet must see it
        ("3", 3, 1),  # a contract error: not retried here
        ("7", 7, 1),  # an API failure (scale to zero, delete pod): surfaces
        (f"{EXIT_RESTART},0", 0, 2),  # world size changed / preempted: restarted in place
        (f"{EXIT_PEER_LOST},{EXIT_RESTART},0", 0, 3),  # a peer died, then a resize
        (f"{EXIT_RESTART},5", 5, 2),  # the restarted child fails for real: that code
    ],
    ids=["ok", "crash", "contract", "api", "restart", "peer-then-restart", "restart-then-crash"],
)
def test_exit_codes(tmp_path: Path, codes: str, exit_code: int, starts: int):
    proc = _supervise(tmp_path, codes)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == exit_code, f"child codes {codes}: supervisor exit {proc.returncode}"
    lines = _starts(tmp_path)
    assert len(lines) == starts, f"child codes {codes}: {len(lines)} starts, expected {starts}"
    # Every start gets the flags unchanged and the count of planned restarts before it.
    assert lines == [f"{i} --epochs 2" for i in range(starts)], lines
    restarts = _events(out, "restart")
    assert [e["restarts"] for e in restarts] == list(range(1, starts)), out


def test_hot_loop_guard(tmp_path: Path):
    env = {
        contract.ENV_SUPERVISOR_MAX_RESTARTS: "2",
        contract.ENV_SUPERVISOR_WINDOW_SECONDS: "60",
    }
    proc = _supervise(tmp_path, str(EXIT_RESTART), env)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_RESTART, out
    assert len(_starts(tmp_path)) == 3, "2 planned restarts allowed, then the guard"
    (last,) = _events(out, "supervisor_exit")
    assert "hot loop: more than 2 planned restarts within 60 s" in str(last["reason"]), last


def test_restarts_outside_the_window_do_not_count(tmp_path: Path):
    env = {
        contract.ENV_SUPERVISOR_MAX_RESTARTS: "1",
        contract.ENV_SUPERVISOR_WINDOW_SECONDS: "0.01",
        contract.ENV_SUPERVISOR_PAUSE_SECONDS: "0.1",
    }
    proc = _supervise(tmp_path, f"{EXIT_RESTART},{EXIT_RESTART},{EXIT_RESTART},0", env)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    assert len(_starts(tmp_path)) == 4


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_is_forwarded_and_not_restarted(tmp_path: Path, sig: signal.Signals):
    """The kubelet's SIGTERM reaches the trainer; its 76 (checkpointed) ends the container."""
    proc = _supervise(tmp_path, "wait")
    assert proc.stdout is not None
    deadline = time.time() + 30
    while proc.stdout.readline().strip() != "ready":
        assert time.time() < deadline, "fake trainer never started"
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == EXIT_RESTART, out
    assert len(_starts(tmp_path)) == 1, "restarted after a forwarded signal"
    assert _events(out, "supervisor_exit")[0]["reason"] == "signal forwarded to the trainer"


def test_killed_child_exit_code(tmp_path: Path):
    proc = _supervise(tmp_path, "-9")  # sys.exit(-9) -> 247; a real kill -9 -> 137
    proc.communicate(timeout=30)
    assert proc.returncode == 247
    from trainer.supervisor import _exit_code

    assert _exit_code(-signal.SIGKILL) == 137


def test_entrypoint_runs_the_trainer_module():
    assert contract.ENTRYPOINT == ("python", "-m", "trainer.supervisor")
    out = subprocess.run(
        [sys.executable, "-m", "trainer.supervisor", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0 and "python -m trainer" in out.stdout, out.stderr[-500:]
