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
from trainer.errors import EXIT_NOT_ADMITTED, EXIT_PEER_LOST, EXIT_RESTART
from trainer.supervisor import waiting_pause

FAKE_TRAINER = """
import os, signal, sys, time
log, codes = sys.argv[1], sys.argv[2].split(",")
with open(log, "a") as f:
    restarts = os.environ.get("TFD_SUPERVISOR_RESTARTS", "unset")
    delay = os.environ.get("TFD_START_DELAY_SECONDS")
    f.write(restarts + " " + " ".join(sys.argv[3:]) + (f" delay={delay}" if delay else "") + "\\n")
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


SERVING_TRAINER = """
import os, signal, sys, time
from trainer import contract
from trainer.metrics import Metrics, MetricsServer
env = os.environ
restarts = int(env[contract.ENV_SUPERVISOR_RESTARTS])
metrics = Metrics()
metrics.identify("run-1", "rev-a", restarts)
MetricsServer(metrics, contract.metrics_port(env), fd=contract.metrics_fd(env)).start()
if restarts < int(sys.argv[1]):  # serve a moment, then ask for a planned restart
    time.sleep(0.3)
    os._exit(76)
signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
time.sleep(60)
"""


def _supervise(
    tmp_path: Path,
    codes: str,
    env: dict[str, str] | None = None,
    child: str = FAKE_TRAINER,
    listen: bool = True,
) -> subprocess.Popen[str]:
    script = tmp_path / "fake_trainer.py"
    script.write_text(child)
    runner = (
        "import sys; from trainer import supervisor; "
        f"s = supervisor.Supervisor(sys.argv[1:], __import__('os').environ, "
        f"supervisor.Limits.from_env(__import__('os').environ), "
        f"command=[sys.executable, {str(script)!r}]); s.install(); "
        f"{'s.listen(); ' if listen else ''}sys.exit(s.run())"
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


def test_waiting_restarts_back_off_and_are_not_a_hot_loop(tmp_path: Path):
    """Exit 77 (not admitted yet) five times, with a guard that allows one planned restart: the
    supervisor keeps waiting, doubling its pause, and the next 76 starts from the base pause."""
    env = {
        contract.ENV_SUPERVISOR_MAX_RESTARTS: "1",
        contract.ENV_SUPERVISOR_WINDOW_SECONDS: "60",
    }
    wait = str(EXIT_NOT_ADMITTED)
    proc = _supervise(tmp_path, ",".join([wait] * 5 + [str(EXIT_RESTART), wait, "0"]), env)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    # The child after each 77 is told how long to wait (it serves its probes meanwhile); the
    # supervisor's own pause stays the base one.
    delays = [line.partition("delay=")[2] for line in _starts(tmp_path)]
    assert delays == ["", "0.05", "0.1", "0.2", "0.4", "0.8", "", "0.05"], _starts(tmp_path)
    restarts = _events(out, "restart")
    assert [e["pause_s"] for e in restarts] == [0.05] * 7, out
    assert [e.get("wait_s") for e in restarts] == [0.05, 0.1, 0.2, 0.4, 0.8, None, 0.05], out


@pytest.mark.parametrize(
    ("base", "waits", "pause"),
    [(1.0, 0, 1.0), (1.0, 1, 2.0), (1.0, 3, 8.0), (1.0, 4, 10.0), (1.0, 40, 10.0), (20.0, 0, 10.0)],
)
def test_waiting_pause_doubles_up_to_the_cap(base: float, waits: int, pause: float):
    assert contract.SUPERVISOR_MAX_WAIT_SECONDS == 10.0
    assert waiting_pause(base, waits) == pause


def test_waiting_for_too_long_ends_the_supervisor_with_77(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    """The others never stop for the new size: after SUPERVISOR_MAX_WAITING_SECONDS of exit
    77 the kubelet must see it (here 0.5 s instead of 30 minutes, in-process)."""
    from trainer import supervisor

    monkeypatch.setattr(contract, "SUPERVISOR_MAX_WAITING_SECONDS", 0.5)
    script = tmp_path / "fake_trainer.py"
    script.write_text(FAKE_TRAINER)
    limits = supervisor.Limits(max_restarts=1, window_s=60, pause_s=0.05)
    command = [sys.executable, str(script), str(tmp_path / "starts.log"), str(EXIT_NOT_ADMITTED)]
    code = supervisor.Supervisor([], os.environ, limits, command=command).run()
    assert code == EXIT_NOT_ADMITTED
    (last,) = _events(capsys.readouterr().out, "supervisor_exit")
    assert str(last["reason"]).startswith("not admitted for over 0.5 s"), last
    assert len(_starts(tmp_path)) > 2, "gave up before waiting"


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


@pytest.mark.parametrize(
    ("held", "refused"),
    [(True, False), (False, True)],
    ids=["socket-held-by-the-supervisor", "bound-by-each-child"],
)
def test_probes_are_answered_across_planned_restarts(tmp_path: Path, held: bool, refused: bool):
    """With the port held by the supervisor, no probe is refused while the trainer restarts in
    place (3 planned restarts, 1 s pauses); each child binding it itself leaves 1 s gaps, in
    which a probe is refused (the second case shows that this test sees them)."""
    import http.client
    import socket
    import urllib.request

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {
        contract.ENV_METRICS_PORT: str(port),
        contract.ENV_SUPERVISOR_PAUSE_SECONDS: "1.0",
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),  # the child imports trainer
    }
    # The fake child takes its restart count from argv[1] (the supervisor passes argv through).
    proc = _supervise(tmp_path, "", env, child=SERVING_TRAINER.replace("sys.argv[1]", "3"),
                      listen=held)  # fmt: skip
    seen: set[int] = set()
    errors: list[str] = []
    deadline = time.time() + 60
    url = f"http://127.0.0.1:{port}{contract.METRICS_PATH}"
    try:
        while 3 not in seen:
            if proc.poll() is not None or time.time() > deadline:
                pytest.fail(f"saw restarts {seen}, errors {errors[:3]}: {proc.communicate()[0]}")
            try:
                with urllib.request.urlopen(url, timeout=5) as resp:
                    text = resp.read().decode()
                restarts = contract.METRIC_SUPERVISOR_RESTARTS
                line = next(x for x in text.splitlines() if x.startswith(restarts))
                seen.add(int(float(line.split()[-1])))
            except (OSError, http.client.HTTPException) as err:
                # Before the first child (or the supervisor) listens, refusals are expected; a
                # request a child had accepted when it exited is dropped or cut short, not
                # refused (one probe at most per restart, never three in a row).
                if seen and isinstance(getattr(err, "reason", err), ConnectionRefusedError):
                    errors.append(repr(err))
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    assert bool(errors) is refused, errors[:3]
    assert len(_events(out, "restart")) == 3, out
