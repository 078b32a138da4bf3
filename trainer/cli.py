"""Command line of the trainer: ``python -m trainer [flags]``.

The flags are defined once, in :mod:`trainer.contract.flags` (the Pulumi program writes the
pods' ``args`` from the same definition). ``main`` maps every
:class:`~trainer.errors.TrainerError` to its exit code with one line on stderr, no traceback; any
other exception prints its traceback and exits ``EXIT_UNEXPECTED`` (1).
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Sequence

from trainer.config import Config
from trainer.contract.events import ERROR_PREFIX
from trainer.contract.flags import build_parser
from trainer.errors import EXIT_OK, EXIT_UNEXPECTED, EXIT_USAGE, TrainerError

__all__ = ["Config", "build_parser", "main", "parse_args"]


def parse_args(argv: Sequence[str] | None = None) -> Config:
    """Parse and validate flags (:meth:`~trainer.contract.flags.TrainerFlags.from_argv`):
    argparse exits with code 2 (``EXIT_USAGE``) on bad flags."""
    return Config.from_argv(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the trainer; returns (or exits with) the documented exit code."""
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    config = parse_args(argv)
    try:
        from trainer.lifecycle import run

        code = run(config, os.environ)
    except TrainerError as err:
        _hard_exit(err.exit_code, f"{ERROR_PREFIX}{err}")
    except KeyboardInterrupt:
        _hard_exit(EXIT_USAGE, "trainer: interrupted")
    except Exception:  # noqa: BLE001 - a bug or an unmapped TensorFlow error (OOM, internal)
        # The traceback is what a bug report needs; then the same forced exit as for known
        # errors, since TensorFlow's threads can hang a normal interpreter shutdown.
        traceback.print_exc()
        _hard_exit(EXIT_UNEXPECTED, "trainer: unexpected error (traceback above)")
    _hard_exit(code if code is not None else EXIT_OK, "")
    return code  # pragma: no cover - _hard_exit does not return


def _hard_exit(code: int, message: str) -> None:
    """Flush and leave without Python's shutdown sequence.

    After a collective failure TensorFlow's gRPC and coordination threads can block interpreter
    shutdown (thread joins, atexit), so a worker that must exit would hang instead.
    """
    if message:
        print(message, file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
