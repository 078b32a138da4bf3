"""The trainer's validated settings: its flags, :class:`trainer.contract.flags.TrainerFlags`.

The training code depends on the settings and not on the command line (``trainer.train``,
``trainer.task`` and ``trainer.controller`` import this, ``trainer.cli`` imports them lazily).
``Config`` is the name the training code knows them by; the definition (fields, defaults, rules,
help) is in the contract, where the Pulumi program builds the container's ``args`` from the same
class. Imports no TensorFlow.
"""

from __future__ import annotations

from trainer.contract.flags import TrainerFlags

Config = TrainerFlags
