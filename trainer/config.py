"""The trainer's validated settings: one frozen dataclass, parsed once by :mod:`trainer.cli`.

Its own module so that the training code depends on the settings and not on the command line
(``trainer.train`` imports this, ``trainer.cli`` imports ``trainer.train`` lazily). Imports no
TensorFlow.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainer.contract import ON_DONE_MODES

ON_DONE = ON_DONE_MODES
PRECISIONS = ("auto", "fp32", "bf16", "fp16")
"""``--precision``; see :mod:`trainer.precision` for what each needs and how ``auto`` resolves."""
STRATEGIES = ("auto", "multi-worker")
"""``--strategy``: ``auto`` follows the pod's shape (trainer.placement); ``multi-worker`` uses
MultiWorkerMirroredStrategy even for one worker (to measure its cost against the default)."""
LR_SCALING = ("linear", "none")
"""``--learning-rate-scaling``: ``linear`` (default) multiplies ``--learning-rate`` by the number
of replicas, so the rate is proportional to the global batch (the linear scaling rule, Goyal et
al. 2017); ``none`` uses ``--learning-rate`` whatever the global batch."""


@dataclass(frozen=True)
class Config:
    """Validated trainer flags; see ``trainer.cli.build_parser`` for units, defaults and ranges."""

    dataset: str = "synthetic"
    epochs: int = 3
    batch_size: int = 64
    steps_per_epoch: int = 0
    checkpoint_every: int = 200
    steps_per_call: int = 16
    collective: str = "auto"
    collective_timeout: float = 0.0
    heartbeat_timeout: float = 3.0
    model: str = ""
    loss: str = ""
    num_classes: int = 0
    seed: int = 1
    deterministic: bool = False
    learning_rate: float = 1e-3
    learning_rate_scaling: str = "linear"
    synthetic_examples: int = 4096
    eval_dataset: str = ""
    eval_split: float = 0.0
    tensorboard_dir: str = ""
    on_done: str = "idle"
    log_every: float = 5.0
    intra_op_threads: int = 0
    cpu_devices: int = 1
    replicas_poll: float = 30.0
    precision: str = "auto"
    allow_emulated_precision: bool = False
    jit: bool = False
    strategy: str = "auto"
    input_only: bool = False

    def learning_rate_for(self, replicas: int) -> float:
        """The optimizer's learning rate with ``replicas`` replicas (``--batch-size`` each)."""
        return self.learning_rate * (replicas if self.learning_rate_scaling == "linear" else 1)
