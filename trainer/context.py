"""What one worker process knows about itself, shared by the task, the controller and the end of
the run: its settings, environment, place in the cluster, run directory, log, metrics and stop
flag. A leaf module (no TensorFlow, nothing of the training loop), so nothing it is passed to
has to import the module that built it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from trainer import contract
from trainer.config import Config
from trainer.logs import Log
from trainer.manifest import RunGuard
from trainer.metrics import Metrics
from trainer.signals import StopSignal


@dataclass
class WorkerContext:
    """One worker process: settings, pod environment, cluster place, run directory and outputs."""

    config: Config
    env: Mapping[str, str]
    spec: contract.ClusterSpec
    root: str
    """The run's directory (``TFD_CHECKPOINT_DIR``)."""
    log: Log
    metrics: Metrics
    stop: StopSignal
    guard: RunGuard | None = None
    """The run's manifest check and the chief's lease (set by trainer.lifecycle)."""

    @property
    def is_chief(self) -> bool:
        return self.spec.is_chief

    @property
    def run_id(self) -> str:
        return contract.run_id_from_env(self.env)
