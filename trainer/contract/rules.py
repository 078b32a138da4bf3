"""The rules both sides apply: written once here, read by the trainer and by the Pulumi program.

A value the stack accepts must be one the trainer accepts, and the reverse where the trainer's
input comes from the stack. Each rule below used to exist twice (``infra/config.py`` and the
trainer's flags or pod environment) and the copies had drifted; each says which of the old
rules it kept and why.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass


def _number(value: float) -> str:
    """``1000`` and ``0.5``, never ``1000.0``: a bound as a reader writes it."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


@dataclass(frozen=True)
class Interval:
    """A number between two bounds, each closed or open; ``hi=None``: no upper bound.

    Attributes:
        lo, hi: the bounds.
        integer: whole numbers only (text ``"3"``, never ``"3.0"``).
        lo_open, hi_open: the bound itself is excluded.
        unit: what the number counts (``"seconds"``), for the rule's text.
        note: appended to the rule's text (``", 0 = off"``).
    """

    lo: float
    hi: float | None = None
    integer: bool = True
    lo_open: bool = False
    hi_open: bool = False
    unit: str = ""
    note: str = ""

    @property
    def bounds(self) -> str:
        """``[1, 1000]``, ``(0, 86400)``; ``>= 1`` without an upper bound."""
        if self.hi is None:
            return f"{'>' if self.lo_open else '>='} {_number(self.lo)}"
        left, right = "(" if self.lo_open else "[", ")" if self.hi_open else "]"
        return f"{left}{_number(self.lo)}, {_number(self.hi)}{right}"

    @property
    def text(self) -> str:
        """The rule as the error messages state it: ``must be <text>; got <value>``."""
        if self.integer:
            noun = f"a whole number of {self.unit}" if self.unit else "an integer"
        else:
            noun = f"a number of {self.unit}" if self.unit else "a number"
        joint = " " if self.hi is None else " in "
        return f"{noun}{joint}{self.bounds}{self.note}"

    def whole(self) -> Interval:
        """The same bounds, whole numbers only (a stack key Pulumi declares as an integer)."""
        return Interval(self.lo, self.hi, True, self.lo_open, self.hi_open, self.unit, self.note)

    def contains(self, value: object) -> bool:
        """``value`` is a number of the right kind within the bounds (``bool`` is no number)."""
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        if self.integer and not isinstance(value, int):
            return False
        if isinstance(value, float) and not math.isfinite(value):
            return False
        above = value > self.lo if self.lo_open else value >= self.lo
        if self.hi is None:
            return above
        return above and (value < self.hi if self.hi_open else value <= self.hi)

    def parse(self, text: str) -> int | float:
        """The number ``text`` writes, within the bounds.

        Raises:
            ValueError: not a number of the right kind, or out of bounds (message: the rule).
        """
        try:
            value: int | float = int(text) if self.integer else float(text)
        except ValueError:
            raise ValueError(self.text) from None
        if not self.contains(value):
            raise ValueError(self.text)
        return value


# --- The run id. ---
RUN_ID = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
"""A run id, and each segment of the checkpoint path the stack builds from its project and
stack names: 1-63 letters, digits, ``-``, ``_``, ``.``, starting and ending with a letter or
digit. Kept over the stack's old rule (a lowercase DNS label of at most 20 characters) because
it is exactly what every use of the id needs (a Kubernetes label or annotation value, a
Prometheus label value, one path segment) and the trainer must accept the id of every run
directory it is given: a local run's directory (``python -m trainer.local --checkpoint-dir``)
and runs already recorded in ``DONE`` markers. No resource name is made of it, so nothing in
the cluster needs the DNS-label form."""
RUN_ID_RULE = "1-63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit"

# --- Worker counts. ---
GPUS_PER_WORKER = Interval(0, 16)
"""GPUs per worker pod (the stack's ``gpusPerWorker``, the pod's ``TFD_GPUS``)."""
REPLICAS = Interval(1, 1000)
"""Workers of one job (``replicas``, the autoscaler's bounds, ``TFD_REPLICAS``). The stack's
1000 over the trainer's old 10,000: the Role names every worker pod the trainer may delete
(:func:`trainer.contract.api.api_resource_names`), one entry per possible worker, and a pod
the stack could not have created should not be able to claim a larger job."""

# --- Timeouts (seconds). ---
COLLECTIVE_TIMEOUT = Interval(
    0, 86_400, integer=False, hi_open=True, unit="seconds", note=", 0 = off"
)
"""``--collective-timeout`` / ``collectiveTimeoutSeconds``. The trainer's flags are seconds as
floats (local runs and tests use fractions); the stack key is declared ``integer`` in
``Pulumi.yaml`` and takes whole seconds within the same bounds (:meth:`Interval.whole`), which
the old ``[0, 86399]`` integer range already was."""
HEARTBEAT_TIMEOUT = Interval(0, 86_400, integer=False, lo_open=True, hi_open=True, unit="seconds")
"""``--heartbeat-timeout`` / ``heartbeatTimeoutSeconds``: as :data:`COLLECTIVE_TIMEOUT`, but 0
is no timeout at all and is refused."""

# --- Modes. ---
ON_DONE_SCALE_TO_ZERO = "scale-to-zero"
ON_DONE_IDLE = "idle"
ON_DONE_EXIT = "exit"
ON_DONE_MODES: tuple[str, ...] = (ON_DONE_SCALE_TO_ZERO, ON_DONE_IDLE, ON_DONE_EXIT)
"""Values of the trainer's ``--on-done`` flag: what a worker does once the run is finished.
``scale-to-zero`` (needs API access): the chief PATCHes the StatefulSet's ``scale`` to 0
replicas, every worker waits for SIGTERM; ``idle``: serve the final metrics until terminated;
``exit``: exit 0."""
ON_DONE_POD_MODES: tuple[str, ...] = (ON_DONE_SCALE_TO_ZERO, ON_DONE_IDLE)
"""The modes a StatefulSet pod may use (the stack's ``onDone``): ``exit`` ends the container,
which the pod's ``restartPolicy: Always`` restarts, finding the run finished, exiting again,
into a back-off loop. ``exit`` is for local runs."""

COLLECTIVES: tuple[str, ...] = ("auto", "ring", "nccl")
"""``--collective`` / ``collective``; ``nccl`` needs GPUs."""
PRECISIONS: tuple[str, ...] = ("auto", "fp32", "bf16", "fp16")
"""``--precision`` / ``precision``; see :mod:`trainer.precision` for what each needs and how
``auto`` resolves."""
STRATEGIES: tuple[str, ...] = ("auto", "multi-worker")
"""``--strategy``: ``auto`` follows the pod's shape (trainer.placement); ``multi-worker`` uses
MultiWorkerMirroredStrategy even for one worker (to measure its cost against the default)."""
LR_SCALING: tuple[str, ...] = ("linear", "none")
"""``--learning-rate-scaling``: ``linear`` (default) multiplies ``--learning-rate`` by the number
of replicas, so the rate is proportional to the global batch (the linear scaling rule, Goyal et
al. 2017); ``none`` uses ``--learning-rate`` whatever the global batch."""

# --- Names. ---
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
"""RFC 1123 label: names of StatefulSets, Services and namespaces."""
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
"""RFC 1123 subdomain: cluster domains, StorageClass names."""


def did_you_mean(name: str, known: Iterable[str], cutoff: float = 0.75) -> str:
    """The known name closest to a mistyped ``name`` (``--epoch`` -> ``--epochs``), or ``""``
    when none is close: the hint of every unknown flag and stack key."""
    near = difflib.get_close_matches(name, sorted(known), n=1, cutoff=cutoff)
    return near[0] if near else ""


@dataclass(frozen=True)
class ModuleFunction:
    """``module:function`` naming a Python callable; empty: the built-in one. The module is a
    dotted name to import, never a file path (``/x/m.py:build`` failed only at the import, in
    every worker, after TensorFlow's start-up)."""

    text: str = "'module:function' with an importable module (my_model:build for ./my_model.py)"

    def contains(self, value: object) -> bool:
        if not isinstance(value, str):
            return False
        if not value:
            return True
        module, sep, func = value.partition(":")
        parts = module.split(".")
        return (
            bool(sep and func.isidentifier() and all(p.isidentifier() for p in parts))
            and parts[-1] != "py"
        )

    def parse(self, text: str) -> str:
        if not self.contains(text):
            raise ValueError(self.text)
        return text


MODULE_FUNCTION = ModuleFunction()


STORAGE_SCHEMES = ("gs",)
"""The URI schemes the trainer reads and writes, besides local paths: TensorFlow 2.21's own
filesystems are ``file``, ``gs`` and ``ram`` (docs/trainer.md#storage says why s3 is not one)."""
S3_INSTEAD = (
    "s3:// is not supported: TensorFlow 2.21 has no S3 filesystem (tensorflow-io's, the last, "
    "does not load on it); on AWS keep checkpoints on a ReadWriteMany claim on EFS "
    "(checkpointStorageClass, checkpointUri empty) and data on it or in the image"
)


def storage_problem(location: str) -> str | None:
    """Why the trainer cannot read or write ``location`` (``None``: a local path or a URI of
    :data:`STORAGE_SCHEMES`): the one rule of the stack config, the trainer's flags and
    environment, and ``trainer.local``."""
    scheme, sep, _ = location.partition("://")
    if not sep or scheme in STORAGE_SCHEMES:
        return None
    if scheme.lower() == "s3":
        return S3_INSTEAD
    return f"{scheme}:// is not a filesystem the trainer has (local paths and gs:// URIs)"
