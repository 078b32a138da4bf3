"""docs/infra.md's table of the workers' rights is generated from the Role's definition."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools import worker_rights
from trainer import contract

ROOT = Path(__file__).resolve().parents[2]


def test_the_committed_table_is_what_the_role_generates() -> None:
    committed = (ROOT / "docs" / "infra.md").read_text()
    assert committed == worker_rights.render(committed), (
        "docs/infra.md: the worker rights table is stale: run .venv/bin/python -m "
        "tools.worker_rights"
    )
    assert worker_rights.main(["--check"]) == 0


def test_every_call_of_the_role_has_its_row() -> None:
    table = worker_rights.table()
    for call in contract.API_CALLS:
        assert f"| `{call.verb}` | `{call.resource}` (`{call.api_group or 'core'}`)" in table, call
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    assert len(rows) == len(contract.API_CALLS), rows
    (scale,) = [r for r in rows if "`statefulsets/scale`" in r]
    assert "`<namespace>.<appName>-worker.scale-to-zero`: `spec.replicas` 0 only" in scale


def test_a_new_right_changes_the_table_and_fails_the_check(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    doc = tmp_path / "infra.md"
    doc.write_text((ROOT / "docs" / "infra.md").read_text())
    monkeypatch.setattr(worker_rights, "DOC", doc)
    monkeypatch.setattr(worker_rights, "ROOT", tmp_path)
    granted = (*contract.API_CALLS, contract.ApiCall("apps", "statefulsets", "patch"))
    monkeypatch.setattr(contract.api, "API_CALLS", granted)  # where role_rules reads it
    table = worker_rights.table()
    # A write on the StatefulSet itself is a guarded write too.
    assert "| `patch` | `statefulsets` (`apps`) | `<appName>-worker` | ValidatingAdmission" in (
        table
    ), table
    assert worker_rights.main(["--check"]) == 1
    assert worker_rights.main([]) == 0
    assert table in doc.read_text() and worker_rights.main(["--check"]) == 0


def test_a_document_without_the_markers_is_refused() -> None:
    with pytest.raises(ValueError, match="no '<!-- worker-rights"):
        worker_rights.render("# Infrastructure\n")
