"""A run's completion record (the ``DONE`` marker) and whether a finished run trains again.

A run is its checkpoint directory (``TFD_CHECKPOINT_DIR=<root>/<run id>``). The chief writes
``DONE`` last, as one JSON line: the run id, the final step, the epochs, steps per epoch and
global batch that step counts, and when it was written (``finished_utc``). A finished run stays
finished, with one exception: the requested total steps exceed the final step recorded
(``--epochs`` raised with the same run id; another ``--steps-per-epoch`` is refused before this
by the run manifest, ``trainer.manifest``); the workers then resume from the last checkpoint
and write ``DONE`` and ``summary.json`` again at the end. Imports no TensorFlow at import time.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from trainer import contract
from trainer.config import Config
from trainer.errors import CheckpointError
from trainer.storage import join, read_text, write_text


@dataclass(frozen=True)
class DoneRecord:
    """The content of ``DONE``: the one JSON line the chief writes, every field present.

    ``run_id`` and ``finished_utc`` are filled in by ``trainer.finish`` just before the write;
    a marker without any field (or one that is not JSON) is refused, not read with defaults.
    """

    final_step: int
    epochs: int
    steps_per_epoch: int
    global_batch: int
    run_id: str = ""
    finished_utc: str = ""
    """ISO 8601 UTC time the chief wrote the marker (``trainer.lease.utc``)."""

    def to_text(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":")) + "\n"

    @classmethod
    def parse(cls, text: str, where: str) -> DoneRecord:
        """Raises: CheckpointError naming ``where`` when the text is not a complete record."""
        stripped = text.strip()
        try:
            doc = json.loads(stripped)
            if not isinstance(doc, dict):
                raise TypeError(doc)
            keys = ("final_step", "epochs", "steps_per_epoch", "global_batch")
            ints = {k: _int(doc[k]) for k in keys}
            if min(ints.values()) < 0:
                raise ValueError(ints)
            strs = {k: doc[k] for k in ("run_id", "finished_utc")}
            if not all(isinstance(v, str) for v in strs.values()):
                raise TypeError(strs)
            return cls(**ints, **strs)
        except (ValueError, KeyError, TypeError):
            raise CheckpointError(
                f"{where}: must be a JSON object with final_step, epochs, steps_per_epoch, "
                f"global_batch (integers >= 0), run_id and finished_utc (strings); got "
                f"{stripped[:200]!r}; delete it only if the run is not finished"
            ) from None

    def requested_steps(self, config: Config) -> int:
        """The total steps ``config`` asks for, counted like ``final_step`` (at the recorded
        steps per epoch unless ``--steps-per-epoch`` is explicit)."""
        return (config.steps_per_epoch or self.steps_per_epoch) * config.epochs

    def finished_for(self, config: Config) -> bool:
        """True when the run is finished for these flags: nothing more is requested."""
        return self.requested_steps(config) <= self.final_step


def _int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(value)
    return value


def read_done(root: str) -> DoneRecord | None:
    """The run's ``DONE`` record, or ``None`` when the run is not finished.

    Raises:
        CheckpointError: the directory cannot be read, or ``DONE`` is not a record.
    """
    path = join(root, contract.DONE_MARKER)
    text = read_text(path)
    if text is None:
        return None
    return DoneRecord.parse(text, path)


def write_done(root: str, record: DoneRecord) -> None:
    """Write ``DONE`` (atomically, last: the run is finished once it exists)."""
    write_text(join(root, contract.DONE_MARKER), record.to_text(), "DONE")
