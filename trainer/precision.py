"""Numeric precision: the Keras mixed-precision policy a worker trains in, and fp16's loss scaling.

``auto`` picks bf16 only where it is measured faster than fp32 (GPUs of compute capability
>= 8.0, CPUs with AVX512-BF16 or AMX) and never fp16 (its loss scaling changes the
trajectory); an emulated type is refused unless ``--allow-emulated-precision``. Variables
stay float32, so checkpoints restore across precisions. The rule and its measurements:
docs/trainer.md, "Precision and speed". Imports no TensorFlow at module level.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer.contract.rules import PRECISIONS
from trainer.errors import UsageError

POLICIES = {"fp32": "float32", "bf16": "mixed_bfloat16", "fp16": "mixed_float16"}
CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
"""/proc/cpuinfo flags of CPUs that compute bfloat16 natively (AVX512-BF16, AMX): ``auto``
picks bf16 on each, where it measured faster than fp32 (docs/trainer.md)."""
MIN_CC = {"bf16": (8, 0), "fp16": (7, 0)}
"""Lowest GPU compute capability with native support (bf16: Ampere; fp16: tensor cores)."""


@dataclass(frozen=True)
class Hardware:
    """What decides the precision: the CPU's flags and each visible GPU's compute capability."""

    cpu_flags: frozenset[str] = frozenset()
    gpu_capabilities: tuple[tuple[int, int], ...] = ()

    @property
    def cpu_bf16(self) -> bool:
        return any(f in self.cpu_flags for f in CPU_BF16_FLAGS)

    def describe(self) -> str:
        if self.gpu_capabilities:
            caps = ", ".join(f"{a}.{b}" for a, b in self.gpu_capabilities)
            return f"{len(self.gpu_capabilities)} GPU(s), compute capability {caps}"
        native = [f for f in CPU_BF16_FLAGS if f in self.cpu_flags]
        return "CPU only, " + (
            f"native bfloat16 ({', '.join(native)})" if native else "no avx512_bf16/amx_bf16"
        )


@dataclass(frozen=True)
class Resolved:
    """The precision a worker trains in, and why."""

    requested: str
    precision: str
    policy: str
    native: bool
    reason: str


def native(precision: str, hw: Hardware) -> bool:
    """Whether ``hw`` computes ``precision`` natively (fp32 always does)."""
    if precision == "fp32":
        return True
    if hw.gpu_capabilities:
        return all(cc >= MIN_CC[precision] for cc in hw.gpu_capabilities)
    return precision == "bf16" and hw.cpu_bf16


def resolve(requested: str, hw: Hardware, allow_emulated: bool = False) -> Resolved:
    """``--precision`` on ``hw``.

    Raises:
        UsageError: an unknown value, or a type ``hw`` only emulates (unless
            ``allow_emulated``); the message names the flag, the rule and the hardware.
    """
    if requested not in PRECISIONS:
        raise UsageError(f"--precision: must be one of {', '.join(PRECISIONS)}; got {requested!r}")
    if requested == "auto":
        chosen, why = _auto(hw)
        return Resolved(requested, chosen, POLICIES[chosen], True, f"auto: {why}")
    ok = native(requested, hw)
    if not ok and not allow_emulated:
        raise UsageError(f"--precision {requested}: {_requirement(requested)}; {hw.describe()}")
    reason = "requested" if ok else "requested, emulated (--allow-emulated-precision)"
    return Resolved(requested, requested, POLICIES[requested], ok, reason)


def _auto(hw: Hardware) -> tuple[str, str]:
    """What ``auto`` picks on ``hw``, and the reason the run's log gives."""
    if hw.gpu_capabilities:
        if native("bf16", hw):
            return "bf16", "every GPU has compute capability >= 8.0 (native bf16)"
        return "fp32", "a GPU below compute capability 8.0 (bf16 emulated)"
    if "amx_bf16" in hw.cpu_flags:
        return "bf16", "the CPU has AMX (amx_bf16): bf16 matmuls measured 2.9x fp32's peak"
    if hw.cpu_bf16:
        return "bf16", (
            "the CPU has avx512_bf16: bf16 measured 1.09x-1.51x fp32 across models "
            "(--precision fp32 to keep float32)"
        )
    return "fp32", "bf16 is not native here (emulated)"


def _requirement(precision: str) -> str:
    if precision == "fp16":
        return (
            "needs GPUs of compute capability >= 7.0 (this hardware would emulate it, slower "
            "than fp32); use --precision auto or fp32"
        )
    return (
        "needs GPUs of compute capability >= 8.0 or a CPU with avx512_bf16/amx_bf16 (this "
        "hardware would emulate it, slower than fp32); use --precision auto or fp32"
    )


def cpu_flags(cpuinfo: str) -> frozenset[str]:
    """The ``flags`` of the first processor in ``/proc/cpuinfo`` text (x86 Linux)."""
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def detect() -> Hardware:
    """This process's hardware: ``/proc/cpuinfo`` flags and TensorFlow's visible GPUs."""
    import tensorflow as tf

    try:
        flags = cpu_flags(Path("/proc/cpuinfo").read_text())
    except OSError:  # not Linux: no native bf16 is assumed
        flags = frozenset()
    caps = []
    for gpu in tf.config.list_physical_devices("GPU"):
        cc = tf.config.experimental.get_device_details(gpu).get("compute_capability")
        caps.append(tuple(cc) if cc else (0, 0))
    return Hardware(flags, tuple(caps))


@dataclass
class Precision:
    """A resolved precision applied to this process: policy, optimizer wrapping, gradients."""

    resolved: Resolved
    base_optimizer: Any = None
    optimizer: Any = None

    @property
    def name(self) -> str:
        return self.resolved.precision

    @property
    def loss_scaling(self) -> bool:
        return self.resolved.precision == "fp16"

    def wrap(self, optimizer: Any) -> Any:
        """The optimizer to step with: ``optimizer``, or fp16's ``LossScaleOptimizer`` around
        it. Call under the strategy scope, after restoring a checkpoint into ``optimizer``."""
        import tf_keras

        self.base_optimizer = optimizer
        self.optimizer = (
            tf_keras.mixed_precision.LossScaleOptimizer(optimizer)
            if self.loss_scaling
            else optimizer
        )
        return self.optimizer

    def scale(self, loss: Any) -> Any:
        """The loss to differentiate: fp16 multiplies it by the loss scale. Call it inside the
        ``GradientTape``, so the tape records the multiplication."""
        return self.optimizer.get_scaled_loss(loss) if self.loss_scaling else loss

    def gradients(self, tape: Any, scaled_loss: Any, variables: Sequence[Any]) -> list[Any]:
        """Gradients of :meth:`scale`'s loss, divided by the loss scale again (fp16)."""
        grads = tape.gradient(scaled_loss, variables)
        return self.optimizer.get_unscaled_gradients(grads) if self.loss_scaling else grads

    def apply(self, grads: Iterable[Any], variables: Sequence[Any]) -> None:
        """Apply (fp16: only when every gradient is finite; the scale adapts)."""
        self.optimizer.apply_gradients(zip(grads, variables, strict=True))

    def loss_scale(self) -> float | None:
        """The current dynamic loss scale (fp16), else ``None``."""
        return float(self.optimizer.loss_scale.numpy()) if self.loss_scaling else None

    def good_steps(self) -> int | None:
        """fp16: finite steps since the scale last changed (it doubles after 2000), else
        ``None``."""
        return int(self.optimizer.dynamic_counter.numpy()) if self.loss_scaling else None

    def loss_scale_state(self) -> Any | None:
        """fp16: the checkpointable loss-scale state (the scale and its good-step count), else
        ``None``. Call after :meth:`wrap`."""
        if not self.loss_scaling:
            return None
        # tf-keras exposes the state's values (loss_scale, dynamic_counter) but not the object
        # that checkpoints them; the optimizer tracks it as its child "loss_scale".
        return self.optimizer._loss_scale


def apply_policy(resolved: Resolved) -> Precision:
    """Set the global Keras policy (before the model is built) and return the precision."""
    import tf_keras

    tf_keras.mixed_precision.set_global_policy(resolved.policy)
    return Precision(resolved)


def float32_logits(logits: Any) -> Any:
    """Logits in float32 whatever the compute type: softmax and the loss stay accurate."""
    import tensorflow as tf

    return tf.cast(logits, tf.float32)
