"""``python -m trainer.supervisor [trainer flags]``: the image entrypoint (``contract.ENTRYPOINT``).

Runs ``python -m trainer`` as its child and starts it again in the same container on a planned
restart (exit 75, 76, 77), so the kubelet applies no CrashLoopBackOff; any other exit ends it
with that code, and a hot loop of restarts hands over to the kubelet's back-off. It holds the
metrics port across children so probes wait instead of being refused. Details:
docs/trainer.md, "Supervisor". Standard library only: it is PID 1 and must stay small.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import FrameType

from trainer import contract
from trainer.errors import ContractError


@dataclass(frozen=True)
class Limits:
    """The hot-loop guard and the pause before each planned restart."""

    max_restarts: int = contract.SUPERVISOR_MAX_RESTARTS
    window_s: float = contract.SUPERVISOR_WINDOW_SECONDS
    pause_s: float = contract.SUPERVISOR_PAUSE_SECONDS

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Limits:
        def number(key: str, default: float) -> float:
            raw = env.get(key, "").strip()
            if not raw:
                return default
            try:
                value = float(raw)
            except ValueError:
                value = -1.0
            if value < 0:
                _log("warning", message=f"{key}: must be a number >= 0; got {raw!r}; using "
                     f"{default}")  # fmt: skip
                return default
            return value

        return cls(
            max_restarts=int(number(contract.ENV_SUPERVISOR_MAX_RESTARTS, cls.max_restarts)),
            window_s=number(contract.ENV_SUPERVISOR_WINDOW_SECONDS, cls.window_s),
            pause_s=number(contract.ENV_SUPERVISOR_PAUSE_SECONDS, cls.pause_s),
        )


def _log(event: str, **fields: object) -> None:
    """One JSON line, like the trainer's own events (``worker`` is unknown here: None)."""
    record = {
        "ts": round(time.time(), 3),
        "event": contract.Event(event),  # ValueError for a name outside the contract
        "worker": None,
        "source": "supervisor",
    }
    print(json.dumps({**record, **fields}), flush=True)


class Supervisor:
    """Runs the trainer child, restarts it on planned restarts, forwards signals."""

    def __init__(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        limits: Limits,
        command: Sequence[str] | None = None,
    ) -> None:
        self.command = list(command or (sys.executable, "-m", contract.TRAINER_MODULE))
        self.argv = list(argv)
        self.env = dict(env)
        self.limits = limits
        self.restarts = 0
        self.child: subprocess.Popen[bytes] | None = None
        self.signalled = threading.Event()
        self._lock = threading.Lock()
        self.listener: socket.socket | None = None

    def listen(self) -> None:
        """Bind ``TFD_METRICS_PORT`` for the children (only when it is set: a local run without
        it lets the child bind the default). A bad value or a port in use is left to the child,
        which reports it in its own one-line error."""
        if not self.env.get(contract.ENV_METRICS_PORT, "").strip():
            return
        try:
            port = contract.metrics_port(self.env)
            self.listener = socket.create_server(("0.0.0.0", port), backlog=64)
        except (ContractError, OSError) as err:
            _log("warning", message=f"metrics port not held across restarts: {err}")
            return
        self.listener.set_inheritable(True)

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self._forward)
        signal.signal(signal.SIGINT, self._forward)

    def _forward(self, signum: int, _frame: FrameType | None) -> None:
        self.signalled.set()
        with self._lock:
            child = self.child
        if child is not None and child.poll() is None:
            child.send_signal(signum)

    def _start(self, delay_s: float) -> subprocess.Popen[bytes]:
        env = {**self.env, contract.ENV_SUPERVISOR_RESTARTS: str(self.restarts)}
        # Only what this supervisor sets: never a descriptor or a delay from its own environment.
        for key in (contract.ENV_METRICS_FD, contract.ENV_START_DELAY_SECONDS):
            env.pop(key, None)
        fds: tuple[int, ...] = ()
        if self.listener is not None:
            fds = (self.listener.fileno(),)
            env[contract.ENV_METRICS_FD] = str(fds[0])
        if delay_s > 0:
            env[contract.ENV_START_DELAY_SECONDS] = f"{delay_s:g}"
        with self._lock:
            self.child = subprocess.Popen([*self.command, *self.argv], env=env, pass_fds=fds)
            return self.child

    def run(self) -> int:
        """Supervise until the child ends for good; returns the exit code to leave with."""
        recent: deque[float] = deque()
        waits = 0  # consecutive waiting restarts (contract.SUPERVISOR_WAIT_CODES)
        waiting_since = 0.0
        delay = 0.0
        while True:
            child = self._start(delay)
            if self.signalled.is_set():  # a signal that came while the child was starting
                child.terminate()
            code = _exit_code(child.wait())
            if self.signalled.is_set():
                _log("supervisor_exit", code=code, reason="signal forwarded to the trainer")
                return code
            if code not in contract.SUPERVISOR_RESTART_CODES:
                return code
            if code in contract.SUPERVISOR_WAIT_CODES:
                # The next child waits with its probe server up (TFD_START_DELAY_SECONDS): the
                # supervisor's own pause stays short, so no probe waits long on the socket.
                waiting_since = waiting_since or time.monotonic()
                if time.monotonic() - waiting_since > contract.SUPERVISOR_MAX_WAITING_SECONDS:
                    _log(
                        "supervisor_exit",
                        code=code,
                        restarts=self.restarts,
                        reason=f"not admitted for over "
                        f"{contract.SUPERVISOR_MAX_WAITING_SECONDS:g} s: the other workers never "
                        f"stopped for the new size; exiting with {code} so the kubelet's "
                        "back-off applies",
                    )
                    return code
                delay = waiting_pause(self.limits.pause_s, waits)
                waits += 1
            else:
                delay, waits, waiting_since = 0.0, 0, 0.0
                if self._hot_loop(recent):
                    _log(
                        "supervisor_exit",
                        code=code,
                        restarts=self.restarts,
                        reason=f"hot loop: more than {self.limits.max_restarts} planned restarts "
                        f"within {self.limits.window_s:g} s; exiting with the trainer's code "
                        f"{code} so the kubelet's back-off applies",
                    )
                    return code
            self.restarts += 1
            pause = self.limits.pause_s
            if delay:
                _log("restart", code=code, restarts=self.restarts, pause_s=pause, wait_s=delay)
            else:
                _log("restart", code=code, restarts=self.restarts, pause_s=pause)
            # A SIGTERM during the pause ends the supervisor instead of starting a new child.
            if self.signalled.wait(pause):
                _log("supervisor_exit", code=code, reason="signalled between restarts")
                return code

    def _hot_loop(self, recent: deque[float]) -> bool:
        """Count one planned restart now; whether there were too many within the window."""
        now = time.monotonic()
        recent.append(now)
        while recent and now - recent[0] > self.limits.window_s:
            recent.popleft()
        return len(recent) > self.limits.max_restarts


def waiting_pause(base_s: float, waits: int) -> float:
    """Wait number ``waits + 1`` in a row: doubles from ``base_s``, capped at
    ``contract.SUPERVISOR_MAX_WAIT_SECONDS``. The schedule of waiting restarts and of the
    trainer's start-up StatefulSet read retries (``trainer.lifecycle``)."""
    return min(base_s * 2**waits, contract.SUPERVISOR_MAX_WAIT_SECONDS)


def _exit_code(returncode: int) -> int:
    """A child killed by signal N (returncode -N) becomes 128 + N, as a shell reports it."""
    return 128 - returncode if returncode < 0 else returncode


def main(argv: Sequence[str] | None = None) -> int:
    supervisor = Supervisor(
        sys.argv[1:] if argv is None else argv, os.environ, Limits.from_env(os.environ)
    )
    supervisor.install()
    supervisor.listen()
    return supervisor.run()


if __name__ == "__main__":
    sys.exit(main())
