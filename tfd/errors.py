"""The command's exit codes and its small exception tree.

Every :class:`TfdError` is printed as one line (``tfd: error: ...``) and ends the command with
its code; nothing else a user can cause prints a traceback (``tfd.cli.main``).
"""

from __future__ import annotations

EXIT_OK = 0
"""The command did what was asked; a command that waits for the run: the run is done."""
EXIT_FAILED = 1
"""The run failed (a worker's error, an image that cannot be pulled)."""
EXIT_USAGE = 2
"""Bad arguments or a setting the program's own rules refuse; nothing was changed."""
EXIT_TIMEOUT = 3
"""``--timeout`` passed before the run reached what the command waits for."""
EXIT_STOPPED = 4
"""The run is stopped (``tfd stop``) while the command waited for it."""
EXIT_UNAVAILABLE = 5
"""The stack, the Pulumi engine or the cluster failed or could not be reached."""
EXIT_INTERRUPTED = 130
"""Ctrl-C."""

EXIT_CODES: dict[int, str] = {
    EXIT_OK: "done (or the command did what was asked)",
    EXIT_FAILED: "the run failed",
    EXIT_USAGE: "usage or configuration error; nothing was changed",
    EXIT_TIMEOUT: "timed out (--timeout)",
    EXIT_STOPPED: "the run is stopped",
    EXIT_UNAVAILABLE: "the stack, the Pulumi engine or the cluster failed or is unreachable",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C, SIGTERM or SIGHUP)",
}


class TfdError(Exception):
    """A failure the user can act on; the message is one line."""

    exit_code = EXIT_UNAVAILABLE


class UsageError(TfdError):
    """Bad arguments, an unknown stack, or settings the program's rules refuse."""

    exit_code = EXIT_USAGE


class StackError(TfdError):
    """The Pulumi engine or backend failed (``up`` failed, the stack cannot be read)."""

    exit_code = EXIT_UNAVAILABLE


class ClusterError(TfdError):
    """The cluster cannot be reached or refused a request."""

    exit_code = EXIT_UNAVAILABLE


class NodeUnreachableError(ClusterError):
    """The API server answered but could not reach a pod's node (its kubelet) for a log: a
    preempted, lost or restarting node. ``status`` reads on without that worker's log."""


class RunFailedError(TfdError):
    """The run failed while ``tfd`` waited for it (the cause is the worker's own line)."""

    exit_code = EXIT_FAILED


class WaitTimeoutError(TfdError):
    """``--timeout`` passed."""

    exit_code = EXIT_TIMEOUT


def one_line(text: object, limit: int = 400) -> str:
    """``text`` on one line (engine and API messages span several), at most ``limit`` chars."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."
