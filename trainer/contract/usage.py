"""Command-line mistakes as one line: ``<prog>: error: <flag>: <problem>``.

argparse prints its whole usage block (31 lines for the trainer) before the problem, and says
``unrecognized arguments`` without naming the flag that was meant. :class:`OneLineParser`
prints only the problem, exits 2 (``EXIT_USAGE``), and names the closest known flag for a near
miss; the usage block is for ``--help``.
"""

from __future__ import annotations

import argparse
from collections.abc import Collection, Mapping, Sequence
from typing import Any, NoReturn

from trainer.contract.rules import did_you_mean
from trainer.errors import EXIT_USAGE


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line. ``also_known``: flags another parser
    takes from the same command line (the launcher's beside the trainer's), for the hints;
    ``elsewhere``: the hint of a flag that is set another way (its near miss would mislead)."""

    def __init__(
        self,
        *args: Any,
        also_known: Collection[str] = (),
        elsewhere: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        self.flags: list[str] = list(also_known)  # before argparse adds --help
        self.elsewhere = dict(elsewhere or {})
        super().__init__(*args, **kwargs)

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        action = super().add_argument(*args, **kwargs)
        self.flags += [o for o in action.option_strings if o.startswith("--")]
        return action

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:
        ns, extra = self.parse_known_args(args, namespace)
        if extra:
            self.error(self.unknown(extra))
        return ns

    def unknown(self, extra: Sequence[str]) -> str:
        """``--epoch: unknown flag; did you mean --epochs?``, one per unknown flag."""
        flags = [a.partition("=")[0] for a in extra if a.startswith("-") and not _number(a)]
        if not flags:
            return f"{extra[0]}: unexpected argument (flags are --name value)"
        own = [f for f in self.flags if f != "--help"]
        problems = []
        for flag in dict.fromkeys(flags):
            near = did_you_mean(flag, own)
            hint = self.elsewhere.get(flag) or (f"did you mean {near}?" if near else "")
            problems.append(f"{flag}: unknown flag" + (f"; {hint}" if hint else ""))
        return "; ".join(problems)

    def error(self, message: str) -> NoReturn:
        # argparse writes "argument --epochs: must be ..."; the flag first reads as our others.
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message.removeprefix('argument ')}\n")


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
