"""A run's completion record (the ``DONE`` marker) and whether a finished run trains again.

A run is its checkpoint directory (``TFD_CHECKPOINT_DIR=<root>/<run id>``). The chief writes
``DONE`` last, as one JSON line: the run id, the final step, the epochs, steps per epoch and
global batch that step counts, and when it was written (``finished_utc``). A finished run stays
finished, with one exception: the requested total steps exceed the final step recorded
(``--epochs`` raised with the same run id; another ``--steps-per-epoch`` is refused before this
by the run manifest, ``trainer.manifest``, and continues only a run from before the manifest
existed); the workers then resume from the last checkpoint and write ``DONE`` and
``summary.json`` again at the end. Imports no TensorFlow at
import time.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass

from trainer import contract
from trainer.checkpoints import gfile, join, write_text
from trainer.config import Config
from trainer.errors import CheckpointError


@dataclass(frozen=True)
class DoneRecord:
    """The content of ``DONE``. Markers of earlier versions hold only the final step: their
    ``steps_per_epoch`` is ``None`` and the run is then finished for good. Markers written
    before the end time was recorded have ``finished_utc`` ``""``."""

    final_step: int
    epochs: int | None = None
    steps_per_epoch: int | None = None
    global_batch: int | None = None
    run_id: str = ""
    finished_utc: str = ""
    """ISO 8601 UTC time the chief wrote the marker (``trainer.lease.utc``)."""

    def to_text(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":")) + "\n"

    @classmethod
    def parse(cls, text: str, where: str) -> DoneRecord:
        """Raises: CheckpointError naming ``where`` when the text is neither form."""
        stripped = text.strip()
        try:
            if stripped.isdigit():
                return cls(final_step=int(stripped))
            doc = json.loads(stripped)
            final_step = _opt_int(doc["final_step"])
            if final_step is None or final_step < 0:
                raise ValueError(final_step)
            return cls(
                final_step=final_step,
                epochs=_opt_int(doc.get("epochs")),
                steps_per_epoch=_opt_int(doc.get("steps_per_epoch")),
                global_batch=_opt_int(doc.get("global_batch")),
                run_id=str(doc.get("run_id") or ""),
                finished_utc=str(doc.get("finished_utc") or ""),
            )
        except (ValueError, KeyError, TypeError):
            raise CheckpointError(
                f"{where}: must be the final step or a JSON object with final_step (an integer "
                f">= 0); got "
                f"{stripped[:200]!r}; delete it only if the run is not finished"
            ) from None

    def requested_steps(self, config: Config) -> int | None:
        """The total steps ``config`` asks for, counted like ``final_step`` (at the recorded
        steps per epoch unless ``--steps-per-epoch`` is explicit); ``None`` for old markers."""
        if self.steps_per_epoch is None:
            return None
        return (config.steps_per_epoch or self.steps_per_epoch) * config.epochs

    def finished_for(self, config: Config) -> bool:
        """True when the run is finished for these flags: nothing more is requested."""
        requested = self.requested_steps(config)
        return requested is None or requested <= self.final_step


def _opt_int(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(value)
    return value


def read_done(root: str) -> DoneRecord | None:
    """The run's ``DONE`` record, or ``None`` when the run is not finished.

    Raises:
        CheckpointError: the directory cannot be read, or ``DONE`` is not a record.
    """
    path = join(root, contract.DONE_MARKER)
    try:
        if "://" not in root:  # a local path: no TensorFlow import (seconds) to find out
            if not os.path.exists(path):
                return None
            with open(path, encoding="utf-8") as f:
                text = f.read()
        else:
            fs = gfile()
            if not fs.exists(path):
                return None
            with fs.GFile(path, "r") as f:
                text = f.read()
    except Exception as err:  # noqa: BLE001 - tf.errors.OpError without importing tf eagerly
        raise CheckpointError(
            f"{contract.ENV_CHECKPOINT_DIR}={root!r}: cannot access: {err}"
        ) from None
    return DoneRecord.parse(text, path)


def write_done(root: str, record: DoneRecord) -> None:
    """Write ``DONE`` (atomically, last: the run is finished once it exists)."""
    write_text(join(root, contract.DONE_MARKER), record.to_text())
