"""The one summary line of ``make e2e`` and its exit status, from pytest's JUnit reports.

``python -m tools.e2e_summary UP_S TOTAL_S STATUS REPORT...``: STATUS is the shell's (non-zero
when a cluster did not start or pytest failed). A skipped scenario proved nothing, so any skip
fails the suite too; a report that is missing or unreadable counts as a failure.

Before the line it prints every figure the scenarios measured: the lines of their captured
output (``junit_logging=system-out``) tagged ``[... figure]`` or ``[... figures]``, in run order.
"""

from __future__ import annotations

import re
import sys
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Counts:
    passed: int = 0
    failed: int = 0
    skipped: int = 0


def count(reports: Sequence[str]) -> Counts:
    passed = failed = skipped = 0
    for report in reports:
        try:
            suite = ET.parse(report).getroot()
            suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
            n = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
        except (OSError, ET.ParseError, AttributeError):
            failed += 1
            continue
        failed += n["failures"] + n["errors"]
        skipped += n["skipped"]
        passed += n["tests"] - n["failures"] - n["errors"] - n["skipped"]
    return Counts(passed, failed, skipped)


FIGURE_LINE = re.compile(r"^\[[\w -]*figures?\] ")


def figures(reports: Sequence[str]) -> list[str]:
    """Every figure line of the scenarios' captured output, report by report (unreadable
    reports are counted by :func:`count`, not here)."""
    lines: list[str] = []
    for report in reports:
        try:
            root = ET.parse(report).getroot()
        except (OSError, ET.ParseError):
            continue
        for out in root.iter("system-out"):
            lines += [ln for ln in (out.text or "").splitlines() if FIGURE_LINE.match(ln)]
    return lines


def summary(up_s: int, total_s: int, status: int, reports: Sequence[str]) -> tuple[str, int]:
    """The summary line and the exit code of ``make e2e``."""
    c = count(reports)
    failed = c.failed or (1 if status else 0)  # a cluster that did not start, or no report
    line = (
        f"e2e: {c.passed} passed, {failed} failed, {c.skipped} skipped "
        f"(clusters up {up_s} s, whole run {total_s} s)"
    )
    return line, 1 if status or failed or c.skipped else 0


def main(argv: Sequence[str]) -> int:
    up_s, total_s, status, *reports = argv
    line, code = summary(int(up_s), int(total_s), int(status), reports)
    for figure in figures(reports):
        print(figure)
    print(line)
    if code and not int(status) and not count(reports).failed:
        print("e2e: a skipped scenario counts as a failure", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
