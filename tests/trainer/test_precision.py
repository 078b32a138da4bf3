"""Precision: how ``--precision`` resolves on each kind of hardware, the one-line refusals,
fp16's loss scaling, and checkpoints that restore when the precision changes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from trainer import precision
from trainer.errors import EXIT_USAGE, UsageError
from trainer.local_cluster import parse_events, worker_envs
from trainer.precision import Hardware

CPU_PLAIN = Hardware(frozenset({"avx2", "fma"}))
CPU_AVX512_BF16 = Hardware(frozenset({"avx2", "avx512f", "avx512_bf16"}))
CPU_AMX = Hardware(frozenset({"avx512f", "amx_tile", "amx_bf16"}))
GPU_V100 = Hardware(frozenset({"avx2"}), ((7, 0),))
GPU_A100 = Hardware(frozenset({"avx2"}), ((8, 0), (8, 0)))
GPU_MIXED = Hardware(frozenset({"avx2"}), ((8, 6), (7, 5)))
GPU_P100 = Hardware(frozenset({"avx512_bf16"}), ((6, 0),))  # GPUs decide, not the CPU


@pytest.mark.parametrize(
    ("hw", "requested", "expected"),
    [
        (CPU_PLAIN, "auto", "fp32"),
        (CPU_AVX512_BF16, "auto", "bf16"),  # 1.09x-1.51x (precision-2026-12-07-avx512bf16)
        (CPU_AVX512_BF16, "bf16", "bf16"),
        (CPU_AMX, "auto", "bf16"),
        (GPU_V100, "auto", "fp32"),  # auto never picks fp16 (loss scaling, unmeasured)
        (GPU_A100, "auto", "bf16"),
        (GPU_MIXED, "auto", "fp32"),  # every GPU must have it
        (GPU_P100, "auto", "fp32"),
        (CPU_PLAIN, "fp32", "fp32"),
        (CPU_AMX, "bf16", "bf16"),
        (GPU_A100, "bf16", "bf16"),
        (GPU_V100, "fp16", "fp16"),
        (GPU_A100, "fp16", "fp16"),
        (GPU_MIXED, "fp16", "fp16"),
    ],
)
def test_resolve(hw: Hardware, requested: str, expected: str):
    got = precision.resolve(requested, hw)
    assert got.precision == expected, f"{requested} on {hw.describe()}: {got}"
    assert got.policy == precision.POLICIES[expected]
    assert got.native, f"{requested} on {hw.describe()}: resolved to an emulated type"


@pytest.mark.parametrize(
    ("hw", "requested", "message"),
    [
        (
            CPU_PLAIN,
            "fp16",
            "--precision fp16: needs GPUs of compute capability >= 7.0 (this hardware would "
            "emulate it, slower than fp32); use --precision auto or fp32; CPU only, no "
            "avx512_bf16/amx_bf16",
        ),
        (
            CPU_AMX,
            "fp16",
            "--precision fp16: needs GPUs of compute capability >= 7.0 (this hardware would "
            "emulate it, slower than fp32); use --precision auto or fp32; CPU only, native "
            "bfloat16 (amx_bf16)",
        ),
        (
            CPU_PLAIN,
            "bf16",
            "--precision bf16: needs GPUs of compute capability >= 8.0 or a CPU with "
            "avx512_bf16/amx_bf16 (this hardware would emulate it, slower than fp32); use "
            "--precision auto or fp32; CPU only, no avx512_bf16/amx_bf16",
        ),
        (
            GPU_V100,
            "bf16",
            "--precision bf16: needs GPUs of compute capability >= 8.0 or a CPU with "
            "avx512_bf16/amx_bf16 (this hardware would emulate it, slower than fp32); use "
            "--precision auto or fp32; 1 GPU(s), compute capability 7.0",
        ),
        (
            GPU_P100,
            "fp16",
            "--precision fp16: needs GPUs of compute capability >= 7.0 (this hardware would "
            "emulate it, slower than fp32); use --precision auto or fp32; 1 GPU(s), compute "
            "capability 6.0",
        ),
        (CPU_PLAIN, "fp8", "--precision: must be one of auto, fp32, bf16, fp16; got 'fp8'"),
    ],
)
def test_refusals_are_one_line(hw: Hardware, requested: str, message: str):
    with pytest.raises(UsageError) as info:
        precision.resolve(requested, hw)
    assert str(info.value) == message
    assert "\n" not in str(info.value)
    assert info.value.exit_code == EXIT_USAGE


@pytest.mark.parametrize(("hw", "requested"), [(CPU_PLAIN, "bf16"), (CPU_PLAIN, "fp16")])
def test_allow_emulated_runs_anyway_and_says_so(hw: Hardware, requested: str):
    got = precision.resolve(requested, hw, allow_emulated=True)
    assert (got.precision, got.native) == (requested, False)
    assert "emulated" in got.reason


@pytest.mark.parametrize(
    ("cpuinfo", "expected"),
    [
        ("processor\t: 0\nflags\t\t: fpu avx2 avx512_bf16\n", {"fpu", "avx2", "avx512_bf16"}),
        ("processor\t: 0\nflags\t: a b\n\nprocessor\t: 1\nflags\t: c\n", {"a", "b"}),
        ("processor\t: 0\nFeatures\t: fp asimd bf16\n", {"fp", "asimd", "bf16"}),  # arm64
        ("no flags here\n", set()),
    ],
)
def test_cpu_flags(cpuinfo: str, expected: set[str]):
    assert precision.cpu_flags(cpuinfo) == frozenset(expected)


@pytest.mark.parametrize(
    ("hw", "reason"),
    [
        (CPU_PLAIN, "auto: bf16 is not native here (emulated)"),
        (CPU_AVX512_BF16, "auto: the CPU has avx512_bf16: bf16 measured"),
        (CPU_AMX, "auto: the CPU has AMX (amx_bf16)"),
        (GPU_A100, "auto: every GPU has compute capability >= 8.0"),
        (GPU_MIXED, "auto: a GPU below compute capability 8.0"),
    ],
)
def test_auto_says_why(hw: Hardware, reason: str):
    got = precision.resolve("auto", hw).reason
    assert got.startswith(reason), f"auto on {hw.describe()}: {got}"


def test_detect_sees_this_machine():
    hw = precision.detect()
    assert hw.cpu_flags, "no CPU flags read from /proc/cpuinfo"
    assert precision.resolve("auto", hw).precision in ("fp32", "bf16")


def _fp16() -> precision.Precision:
    return precision.Precision(precision.resolve("fp16", GPU_V100))


def test_fp16_scales_the_loss_and_unscales_the_gradients():
    import tensorflow as tf
    import tf_keras

    prec = _fp16()
    w = tf.Variable([1.0, -2.0])
    prec.wrap(tf_keras.optimizers.SGD(0.1))
    scale = prec.loss_scale()
    assert scale == 2.0**15, f"initial dynamic loss scale {scale}"
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(w * w)
        scaled = prec.scale(loss)
    assert float(scaled) == pytest.approx(float(loss) * scale)
    grads = prec.gradients(tape, scaled, [w])
    assert grads[0].numpy().tolist() == [2.0, -4.0], "gradients not unscaled"
    prec.apply(grads, [w])
    assert w.numpy().tolist() == pytest.approx([0.8, -1.6]), "finite step not applied"
    assert prec.loss_scale() == scale, "a finite step changed the scale"


@pytest.mark.parametrize("bad", [float("inf"), float("nan")])
def test_fp16_skips_a_non_finite_step_and_halves_the_scale(bad: float):
    import tensorflow as tf
    import tf_keras

    prec = _fp16()
    w = tf.Variable([1.0, 2.0])
    prec.wrap(tf_keras.optimizers.SGD(0.1))
    before = prec.loss_scale()
    prec.apply([tf.constant([bad, 1.0])], [w])
    assert w.numpy().tolist() == [1.0, 2.0], f"step with a {bad} gradient was applied"
    assert prec.loss_scale() == before / 2, f"scale {before} -> {prec.loss_scale()}"


@pytest.mark.parametrize("name", ["fp32", "bf16"])
def test_no_loss_scaling_without_fp16(name: str):
    import tensorflow as tf
    import tf_keras

    prec = precision.Precision(precision.resolve(name, GPU_A100))
    base = tf_keras.optimizers.SGD(0.1)
    assert prec.wrap(base) is base and prec.base_optimizer is base
    assert prec.loss_scale() is None
    loss = tf.constant(3.0)
    assert prec.scale(loss) is loss


def test_fp16_checkpoint_tracks_the_inner_optimizer():
    """Checkpoints of every precision share one layout: the tracked optimizer is the inner one."""
    import tf_keras

    prec = _fp16()
    base = tf_keras.optimizers.Adam(1e-3)
    wrapped = prec.wrap(base)
    assert prec.base_optimizer is base and wrapped is not base
    assert isinstance(wrapped, tf_keras.mixed_precision.LossScaleOptimizer)


def _fp16_after_steps(bad_steps: int, good_steps: int) -> precision.Precision:
    """fp16 on SGD after ``bad_steps`` non-finite steps (each halves the scale), then
    ``good_steps`` finite ones."""
    import tensorflow as tf
    import tf_keras

    prec = _fp16()
    w = tf.Variable([1.0, 2.0])
    prec.wrap(tf_keras.optimizers.SGD(0.1))
    for grad in [[float("inf"), 0.0]] * bad_steps + [[0.1, 0.1]] * good_steps:
        prec.apply([tf.constant(grad)], [w])
    return prec


def _save(root: Path, **objects: object) -> None:
    import tensorflow as tf

    from trainer.checkpoints import CHECKPOINTS_SUBDIR

    directory = str(root / CHECKPOINTS_SUBDIR)
    tf.train.CheckpointManager(tf.train.Checkpoint(**objects), directory, 1).save()


@pytest.mark.parametrize(
    ("saved", "restored", "expected"),
    [
        # (what the last checkpoint holds, what restore_extra returns, scale and good steps)
        ("fp16 state", True, (2.0**13, 3)),
        ("no loss scale (another precision)", False, (2.0**15, 0)),
        ("no checkpoint", False, (2.0**15, 0)),
    ],
)
def test_fp16_resumes_its_loss_scale_from_an_fp16_checkpoint(
    tmp_path: Path, saved: str, restored: bool, expected: tuple[float, int]
):
    import tensorflow as tf

    from trainer.checkpoints import CHECKPOINTS_SUBDIR, LOSS_SCALE_KEY
    from trainer.restore import restore_extra

    if saved == "fp16 state":
        before = _fp16_after_steps(bad_steps=2, good_steps=3)
        _save(tmp_path, **{LOSS_SCALE_KEY: before.loss_scale_state()})
    elif saved.startswith("no loss scale"):
        _save(tmp_path, step=tf.Variable(7))
    after = _fp16_after_steps(bad_steps=0, good_steps=0)
    # The checkpoint trainer.restore.restore resumed from: here the only one.
    resumed = tf.train.latest_checkpoint(str(tmp_path / CHECKPOINTS_SUBDIR))
    got = restore_extra(resumed, {LOSS_SCALE_KEY: after.loss_scale_state()})
    assert got is restored, f"{saved}: restore_extra returned {got}"
    assert (after.loss_scale(), after.good_steps()) == expected, saved


def test_no_loss_scale_state_without_fp16():
    prec = precision.Precision(precision.resolve("bf16", GPU_A100))
    assert (prec.loss_scale_state(), prec.good_steps()) == (None, None)


PRECISION_CHAIN = ("fp32", "bf16", "fp16", "fp16", "fp32")


def _saved_loss_scale(root: Path) -> tuple[float, int] | None:
    """(scale, good steps) in the latest checkpoint under ``root``; None where it has none."""
    import tensorflow as tf

    from trainer.checkpoints import CHECKPOINTS_SUBDIR, LOSS_SCALE_KEY

    reader = tf.train.load_checkpoint(str(root / CHECKPOINTS_SUBDIR))
    key = f"{LOSS_SCALE_KEY}/{{}}/.ATTRIBUTES/VARIABLE_VALUE"
    if not reader.has_tensor(key.format("current_loss_scale")):
        return None
    return (
        float(reader.get_tensor(key.format("current_loss_scale"))),
        int(reader.get_tensor(key.format("good_steps"))),
    )


@pytest.mark.slow
def test_checkpoints_restore_across_precision_changes(tmp_path: Path):
    """One job trained an epoch at a time, each epoch in the chain's precision (emulated ones
    allowed): every run resumes where the last one stopped, fp16 after fp16 at the saved loss
    scale, and the job still learns."""
    env = worker_envs(1, str(tmp_path))[0]
    spe = 512 // 64
    saved_scale: tuple[float, int] | None = None
    for epoch, name in enumerate(PRECISION_CHAIN, start=1):
        (tmp_path / "DONE").unlink(missing_ok=True)  # the next epoch is a new run of the job
        argv = ["--epochs", str(epoch), "--synthetic-examples", "512", "--batch-size", "64",
                "--precision", name, "--allow-emulated-precision", "--on-done", "exit",
                "--intra-op-threads", "1", "--log-every", "60"]  # fmt: skip
        proc = subprocess.run(
            [sys.executable, "-m", "trainer", *argv],
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert proc.returncode == 0, f"{name} (epoch {epoch}): {proc.stderr[-1500:]}"
        events = {e["event"]: e for e in parse_events(proc.stdout.splitlines())}
        assert events["precision"]["precision"] == name, events["precision"]
        if epoch > 1:
            assert events["resume"]["step"] == (epoch - 1) * spe, f"{name}: {events['resume']}"
        # fp16 resumes its loss scale only from a checkpoint that fp16 saved, exactly as saved.
        resumes_scale = name == "fp16" and PRECISION_CHAIN[epoch - 2] == "fp16"
        assert ("loss_scale" in events) == resumes_scale, f"{name} (epoch {epoch}): {events}"
        if resumes_scale:
            resumed = events["loss_scale"]
            assert (resumed["restored"], resumed["good_steps"]) == saved_scale, resumed
        saved_scale = _saved_loss_scale(tmp_path)
        assert (saved_scale is not None) == (name == "fp16"), f"{name}: {saved_scale}"
        assert events["trained"]["step"] == epoch * spe
        summary = json.loads((tmp_path / "summary.json").read_text())
        assert summary["precision"] == name, summary
    assert summary["accuracy"] >= 0.9, f"after {PRECISION_CHAIN}: accuracy {summary['accuracy']}"
