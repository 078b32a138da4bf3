"""Warm trainer processes: TensorFlow already imported when a restart needs a worker.

A restarted worker spends most of its start-up before its first line of training: the
interpreter, TensorFlow and tf-keras imports (9 s and 540 MB of memory measured on a 2-core
machine at load 5-8; ``make bench-goodput`` splits every restart's start-up). A standby is a
``python -m trainer.standby`` process started ahead of need: it imports those modules, runs no
TensorFlow op (the thread settings of :func:`trainer.runtime.configure` must come before the
runtime starts), then blocks on one JSON line on its stdin, ``{"env": {...}, "argv": [...]}``.
It takes that environment as its own (exactly: variables of the standby's start are dropped)
and runs ``python -m trainer <argv>`` in-process, so its pid, output, exit code and signals are
the worker's.

Environment read at import time cannot change afterwards: TensorFlow's logging level
(``TF_CPP_MIN_LOG_LEVEL``) and ``TF_USE_LEGACY_KERAS``. :class:`StandbyPool` therefore starts
standbys with the launch's own values of :data:`IMPORT_TIME_ENV` and a standby refuses a start
whose values differ (:class:`~trainer.errors.ContractError`, exit 3, one line).

An end of file on stdin before the start line (the launcher is gone) ends the standby quietly.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping, MutableMapping, Sequence
from typing import IO

from trainer.contract.events import ERROR_PREFIX
from trainer.errors import ContractError

IMPORT_TIME_ENV = ("TF_CPP_MIN_LOG_LEVEL", "TF_USE_LEGACY_KERAS")
MODULE = "trainer.standby"


def start_line(env: Mapping[str, str], argv: Sequence[str]) -> str:
    """The line that starts a standby as the worker of ``env`` with trainer flags ``argv``."""
    return json.dumps({"env": dict(env), "argv": list(argv)}) + "\n"


class StandbyPool:
    """Standby processes of one launch, all started with the same environment ``env``.

    :meth:`fill` starts standbys up to ``size`` (call it once the current attempt trains, so
    their imports do not slow its start); :meth:`take` hands one out, or ``None`` when none is
    ready; :meth:`close` ends the unused ones.
    """

    def __init__(self, size: int, env: Mapping[str, str], python: str = sys.executable) -> None:
        self.size = size
        self.env = dict(env)
        self.python = python
        self.ready: list[subprocess.Popen[str]] = []

    def fill(self) -> None:
        self.ready = [p for p in self.ready if p.poll() is None]
        while len(self.ready) < self.size:
            self.ready.append(
                subprocess.Popen(
                    [self.python, "-m", MODULE],
                    env=self.env,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    bufsize=1,
                )
            )

    def take(self, env: Mapping[str, str], argv: Sequence[str]) -> subprocess.Popen[str] | None:
        """A ready standby, started as the worker of ``env`` and ``argv``; ``None`` if none."""
        while self.ready:
            proc = self.ready.pop(0)
            if proc.poll() is not None or proc.stdin is None:
                continue
            try:
                proc.stdin.write(start_line(env, argv))
                proc.stdin.flush()
            except OSError:  # it died between poll and write
                continue
            return proc
        return None

    def close(self) -> None:
        for proc in self.ready:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        self.ready = []


def _warm() -> None:
    """Import what every worker imports before it trains; run nothing."""
    import tensorflow  # noqa: F401
    import tf_keras  # noqa: F401

    import trainer.cli  # noqa: F401
    import trainer.data  # noqa: F401
    import trainer.lifecycle  # noqa: F401
    import trainer.model  # noqa: F401
    import trainer.train  # noqa: F401 - the task and the controller come with it


def adopt(line: str, environ: MutableMapping[str, str]) -> list[str]:
    """Make ``environ`` exactly the start line's environment; its trainer flags.

    Raises:
        ContractError: a variable of :data:`IMPORT_TIME_ENV` differs from ``environ``'s.
    """
    doc = json.loads(line)
    env: dict[str, str] = doc["env"]
    changed = [k for k in IMPORT_TIME_ENV if env.get(k) != environ.get(k)]
    if changed:
        raise ContractError(
            f"standby: {', '.join(changed)} differ from the standby's (read when TensorFlow "
            "was imported); start a standby with the worker's environment"
        )
    environ.clear()
    environ.update(env)
    return list(doc["argv"])


def main(stdin: IO[str] | None = None) -> int:
    """Warm up, wait for the start line, then be the worker (``trainer.cli.main``)."""
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    _warm()
    line = (stdin or sys.stdin).readline()
    if not line:
        os._exit(0)  # the launcher ended before needing this standby
    try:
        argv = adopt(line, os.environ)
    except ContractError as err:
        print(f"{ERROR_PREFIX}{err}", file=sys.stderr)
        return err.exit_code
    sys.argv = ["trainer", *argv]
    from trainer.cli import main as trainer_main

    return trainer_main(argv)


if __name__ == "__main__":
    sys.exit(main())
