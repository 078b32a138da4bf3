"""docs/trainer.md's flag table is generated from the trainer's flag definition."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tools import trainer_flags
from trainer.contract import flags

ROOT = Path(__file__).resolve().parents[2]


def test_the_committed_table_is_what_the_flags_generate() -> None:
    committed = (ROOT / "docs" / "trainer.md").read_text()
    assert committed == trainer_flags.render(committed), (
        "docs/trainer.md: the flag table is stale: run .venv/bin/python -m tools.trainer_flags"
    )
    assert trainer_flags.main(["--check"]) == 0


def test_every_flag_has_one_row_with_its_default_and_rule() -> None:
    rows = [line for line in trainer_flags.table().splitlines() if line.startswith("| `--")]
    names = [row.split(" | ")[0].removeprefix("| ").strip("`") for row in rows]
    assert names == [flags.flag_name(f.name) for f in dataclasses.fields(flags.TrainerFlags)]
    (epochs,) = [r for r in rows if r.startswith("| `--epochs` |")]
    assert epochs == f"| `--epochs` | `3` | {flags.EPOCHS.text} | epochs (default 3) |", epochs
    (on_done,) = [r for r in rows if r.startswith("| `--on-done` |")]
    assert "| `idle` | `scale-to-zero`, `idle`, `exit` |" in on_done, on_done


def test_a_changed_flag_fails_the_check(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    doc = tmp_path / "trainer.md"
    doc.write_text((ROOT / "docs" / "trainer.md").read_text())
    monkeypatch.setattr(trainer_flags, "DOC", doc)
    monkeypatch.setattr(trainer_flags, "ROOT", tmp_path)
    epochs = next(f for f in dataclasses.fields(flags.TrainerFlags) if f.name == "epochs")
    monkeypatch.setattr(epochs, "default", 5)
    assert "| `--epochs` | `5` |" in trainer_flags.table()
    assert trainer_flags.main(["--check"]) == 1
    assert trainer_flags.main([]) == 0
    assert trainer_flags.main(["--check"]) == 0


def test_a_document_without_the_markers_is_an_error() -> None:
    with pytest.raises(ValueError, match="trainer-flags"):
        trainer_flags.render("# Trainer\n")
