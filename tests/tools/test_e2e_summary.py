"""``make e2e``'s summary: a skip or a missing report fails the suite."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.e2e_summary import figures, summary


def report(path: Path, tests: int, failures: int = 0, errors: int = 0, skipped: int = 0) -> str:
    path.write_text(
        f'<testsuites><testsuite name="pytest" tests="{tests}" failures="{failures}" '
        f'errors="{errors}" skipped="{skipped}"></testsuite></testsuites>'
    )
    return str(path)


@pytest.mark.parametrize(
    ("counts", "status", "want_line", "want_code"),
    [
        ([(63, 0, 0, 0), (16, 0, 0, 0)], 0, "79 passed, 0 failed, 0 skipped", 0),
        # The real node's tests skipped: pytest exits 0, yet nothing was proven.
        ([(63, 0, 0, 0), (16, 0, 0, 12)], 0, "67 passed, 0 failed, 12 skipped", 1),
        ([(63, 1, 0, 0)], 1, "62 passed, 1 failed, 0 skipped", 1),
        ([(63, 0, 2, 0)], 1, "61 passed, 2 failed, 0 skipped", 1),
        # A cluster that did not start: no report, status 1.
        ([], 1, "0 passed, 1 failed, 0 skipped", 1),
    ],
)
def test_summary_line_and_exit_code(
    tmp_path: Path, counts: list[tuple[int, int, int, int]], status: int, want_line: str,
    want_code: int,
) -> None:  # fmt: skip
    reports = [report(tmp_path / f"r{i}.xml", *c) for i, c in enumerate(counts)]
    line, code = summary(30, 600, status, reports)
    assert want_line in line and line.endswith("(clusters up 30 s, whole run 600 s)"), line
    assert code == want_code, f"{counts}, status {status}: exit {code}, want {want_code}"


def test_an_unreadable_report_is_a_failure(tmp_path: Path) -> None:
    bad = tmp_path / "bad.xml"
    bad.write_text("<testsuites><testsuite")
    line, code = summary(1, 2, 0, [str(bad), str(tmp_path / "missing.xml")])
    assert "0 passed, 2 failed" in line and code == 1, line


def test_the_figure_lines_of_the_captured_output_in_run_order(tmp_path: Path) -> None:
    out = (
        "[real-node figure] pulumi up: 12.5 s\nnot a figure [x figure] here\n"
        '[tfd output] tfd status:\n[real-node figures] {"a": 1}\n'
    )
    (tmp_path / "r.xml").write_text(
        '<testsuites><testsuite name="pytest" tests="2"><testcase name="a"><system-out>'
        f'{out}</system-out></testcase><testcase name="b"><system-out>[tfd figure] pending: '
        "3.1 s</system-out></testcase></testsuite></testsuites>"
    )
    assert figures([str(tmp_path / "r.xml"), str(tmp_path / "missing.xml")]) == [
        "[real-node figure] pulumi up: 12.5 s",
        '[real-node figures] {"a": 1}',
        "[tfd figure] pending: 3.1 s",
    ]
