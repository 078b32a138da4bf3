"""``tfd``'s command line: argument parsing, and every error as one line with its exit code.

``tfd [--stack S] [--json] COMMAND ...``; ``tfd --help`` lists the commands and exit codes.
Options are never abbreviated (``--epoch`` is refused, not taken for ``--epochs``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
import traceback
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import NoReturn

from tfd.errors import EXIT_CODES, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, TfdError, UsageError

EXIT_BUG = 70
"""A bug in tfd (EX_SOFTWARE): one line; ``TFD_DEBUG=1`` adds the traceback."""


class Parser(argparse.ArgumentParser):
    """argparse that raises :class:`UsageError` (one line) instead of printing the usage."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message} (tfd {self.prog.split()[-1]} --help)")


def _non_negative(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"must be a whole number >= 0; got {text!r}")
    return int(text)


def _positive(text: str) -> int:
    value = _non_negative(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1; got {text!r}")
    return value


def build_parser() -> Parser:
    codes = "\n".join(f"  {code:>3}  {what}" for code, what in EXIT_CODES.items())
    parser = Parser(
        prog="tfd",
        description="Submit, watch, read and stop training runs on a stack of this project.",
        epilog=f"exit codes:\n{codes}\n  {EXIT_BUG:>3}  a bug in tfd",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    common = Parser(add_help=False, allow_abbrev=False)
    common.add_argument("--stack", help="the stack (default: the selected one)")
    common.add_argument("--json", action="store_true", help="JSON for scripts")
    common.add_argument(
        "--project-dir",
        type=Path,
        default=None,
        help="the project directory (default: this checkout)",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, help_text: str) -> Parser:
        return sub.add_parser(
            name, parents=[common], help=help_text, description=help_text, allow_abbrev=False
        )

    status = add("status", "where the run is: phase (and why), progress, ETA, workers, events")
    status.add_argument("--watch", action="store_true", help="until done, failed or stopped")
    status.add_argument("--timeout", help="with --watch: give up after this long (e.g. 30m)")

    logs = add("logs", "every worker's log lines, prefixed with the worker")
    logs.add_argument(
        "-f",
        "--follow",
        action="store_true",
        help="follow, across container restarts and recreated pods",
    )
    logs.add_argument("--worker", type=_non_negative, help="only this worker (its ordinal)")
    logs.add_argument("--since", help="only lines newer than this (e.g. 10m)")

    add("stop", "scale the run to zero workers; checkpoints are kept (submit resumes it)")
    add("runs", "the stack's runs from their records: state, step, accuracy, image, commit")

    submit = add("submit", "set the run's settings, pulumi up, follow until it trains")
    which = submit.add_mutually_exclusive_group()
    which.add_argument("--run-id", help="the run (default: a new run id)")
    which.add_argument(
        "--continue",
        dest="continue_run",
        action="store_true",
        help="continue the stack's current run",
    )
    submit.add_argument("--epochs", type=_positive, help="epochs to train")
    submit.add_argument("--image", help="a prebuilt trainer image (imageReference)")
    submit.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any other stack setting (repeatable)",
    )
    submit.add_argument("--follow", action="store_true", help="follow until the run ends")
    submit.add_argument("--timeout", help="give up waiting after this long (e.g. 1h)")
    return parser


@contextlib.contextmanager
def signals_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP end ``tfd`` as Ctrl-C does: through ``KeyboardInterrupt``, so a
    running ``pulumi up`` is waited for and the interpreter exits normally, running the exit
    handlers that delete the kubernetes client's temporary files (a kubeconfig's client key)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns its exit code (``tfd.errors``)."""
    with signals_interrupt():
        return _main(argv)


def _main(argv: Sequence[str] | None) -> int:
    from tfd import commands

    as_json = "--json" in (sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(argv)
        return commands.run(args)
    except TfdError as err:
        return _report(str(err), err.exit_code, as_json)
    except KeyboardInterrupt:
        return _report("interrupted", EXIT_INTERRUPTED, as_json)
    except BrokenPipeError:  # `tfd logs | head`: the reader has gone, nothing to report
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except SystemExit as exit_:  # --help
        return exit_.code if isinstance(exit_.code, int) else EXIT_USAGE
    except Exception as err:  # noqa: BLE001 - a bug: one line, the traceback on request
        if os.environ.get("TFD_DEBUG"):
            traceback.print_exc()
        return _report(
            f"unexpected {type(err).__name__}: {err} (TFD_DEBUG=1 shows where)", EXIT_BUG, as_json
        )


def _report(message: str, code: int, as_json: bool) -> int:
    lines = [line for line in message.splitlines() if line.strip()] or [message]
    for line in lines:
        print(f"tfd: error: {line}", file=sys.stderr)
    if as_json:
        from tfd.view import print_json

        print_json({"error": lines, "exit_code": code})
    return code
