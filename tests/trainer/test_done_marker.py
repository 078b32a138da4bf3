"""The DONE record and the rule "a finished run stays finished unless more steps are asked"."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainer import contract, done_marker
from trainer.config import Config
from trainer.errors import CheckpointError

RECORD = done_marker.DoneRecord(
    final_step=96,
    epochs=3,
    steps_per_epoch=32,
    global_batch=128,
    run_id="a",
    finished_utc="2026-12-03T10:00:00Z",
)


@pytest.mark.parametrize(
    ("flags", "finished", "requested"),
    [
        ({"epochs": 3}, True, 96),  # the same request: finished
        ({"epochs": 2}, True, 64),  # fewer epochs: finished
        ({"epochs": 4}, False, 128),  # --epochs raised with the same run id: continue
        ({"epochs": 3, "steps_per_epoch": 32}, True, 96),
        ({"epochs": 3, "steps_per_epoch": 40}, False, 120),  # a larger explicit epoch
        ({"epochs": 3, "batch_size": 32}, True, 96),  # another batch: counted in epochs
    ],
)
def test_finished_for(flags: dict[str, int], finished: bool, requested: int):
    config = Config(**flags)
    assert RECORD.requested_steps(config) == requested
    assert RECORD.finished_for(config) is finished, flags


def test_digit_only_or_incomplete_marker_is_refused(tmp_path: Path):
    # A bare final step, or a JSON marker without the end time: not a form the chief writes.
    for text in ("96\n", '{"final_step":96,"epochs":3,"steps_per_epoch":32,"global_batch":128}'):
        (tmp_path / contract.DONE_MARKER).write_text(text)
        with pytest.raises(CheckpointError, match=rf"{tmp_path}/DONE: must be a JSON object"):
            done_marker.read_done(str(tmp_path))


def test_record_round_trip(tmp_path: Path):
    assert done_marker.read_done(str(tmp_path)) is None
    done_marker.write_done(str(tmp_path), RECORD)
    assert done_marker.read_done(str(tmp_path)) == RECORD
    text = (tmp_path / contract.DONE_MARKER).read_text()
    assert text.endswith("\n") and text.count("\n") == 1, text


BAD_MARKERS = ["", "done", '{"epochs": 3}', '{"final_step": "x"}', "[1]"]
BAD_MARKERS += ['{"final_step": 1e999}', '{"final_step": -1}', '{"final_step": 2.5}']
BAD_MARKERS += [RECORD.to_text().replace('"epochs":3', '"epochs":true')]


@pytest.mark.parametrize("text", BAD_MARKERS)
def test_bad_marker_is_a_checkpoint_error(tmp_path: Path, text: str):
    (tmp_path / contract.DONE_MARKER).write_text(text)
    with pytest.raises(CheckpointError, match=r"DONE: must be a JSON object with final_step"):
        done_marker.read_done(str(tmp_path))
