"""The command line of a generated document: write it, or ``--check`` that it is current.

``Pulumi.yaml``'s ``config:`` block and ``docs/config-reference.md`` (from the key table in
``infra/config/``) and the worker rights table of ``docs/infra.md`` (from the Role) are
generated; their tests and CI run ``--check``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path


def write_or_check(
    argv: Sequence[str] | None,
    *,
    prog: str,
    description: str,
    path: Path,
    expected: Callable[[str], str],
    stale: str,
    wrote: str,
) -> int:
    """Write ``expected(current text)`` to ``path``, or with ``--check`` exit 1 and print
    ``stale`` when it differs from what is there. Returns the exit code."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is stale")
    args = parser.parse_args(argv)
    current = path.read_text(encoding="utf-8") if path.exists() else ""
    text = expected(current)
    if args.check:
        if current != text:
            print(stale, file=sys.stderr)
            return 1
        return 0
    path.write_text(text, encoding="utf-8")
    print(wrote)
    return 0


def replace_block(text: str, begin: str, end: str, block: str, where: str) -> str:
    """``text`` with everything from the marker ``begin`` to the marker ``end`` (both included)
    replaced by ``block``, which carries the markers again.

    Raises:
        ValueError: the markers are missing or out of order (``where`` names the file).
    """
    start, stop = text.find(begin), text.find(end)
    if start < 0 or stop < start:
        raise ValueError(f"{where}: no {begin!r} ... {end!r} block")
    return text[:start] + block + text[stop + len(end) :]
