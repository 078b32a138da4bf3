"""``python -m trainer`` turning every user error into one line and an exit code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from trainer import cli, contract
from trainer.errors import (
    EXIT_CHECKPOINT,
    EXIT_CONTRACT,
    EXIT_DATA,
    EXIT_DIVERGED,
    EXIT_MODEL,
    EXIT_UNEXPECTED,
    EXIT_USAGE,
)
from trainer.local_cluster import worker_envs


def test_parse_args_reads_the_flags_definition(capsys: pytest.CaptureFixture[str]):
    """The command line is the contract's flags (their rules: tests/trainer/contract)."""
    assert cli.parse_args(["--epochs", "5", "--jit"]) == contract.TrainerFlags(epochs=5, jit=True)
    with pytest.raises(SystemExit) as info:
        cli.parse_args(["--epoch", "5"])
    assert info.value.code == EXIT_USAGE
    err = capsys.readouterr().err
    assert err == "python -m trainer: error: --epoch: unknown flag; did you mean --epochs?\n", err


CORRUPT_STATE = "corrupt-state"
CORRUPT_INDEX = "corrupt-index"
BAD_RECORD = "bad-record"
"""TFRecords whose second file ends with a record of 5 values for a 28x28x1 'x'."""
ALL_NAN = "all-nan"
"""An .npz of NaN features: the first training call's loss is NaN."""
NO_PORT = "tf-config-no-port"
GPUS_GIVEN = "gpus-given"
"""A pod given a GPU (``TFD_GPUS=1``) on these GPU-less machines: TensorFlow sees none."""
CASES = {
    "bad-data-path": (["--dataset", "/nonexistent/train.npz"], None, EXIT_DATA, "no such file"),
    "bad-model": (["--model", "no_such_pkg_q:build"], None, EXIT_MODEL, "cannot import"),
    CORRUPT_STATE: ([], CORRUPT_STATE, EXIT_CHECKPOINT, "checkpoint: corrupt"),
    CORRUPT_INDEX: ([], CORRUPT_INDEX, EXIT_CHECKPOINT, "ckpt-10: cannot restore"),
    "bad-contract": ([], "contract", EXIT_CONTRACT, "TFD_POD_NAME: ordinal must be <"),
    BAD_RECORD: (
        ["--batch-size", "2"],
        BAD_RECORD,
        EXIT_DATA,
        "part-1.tfrecord: feature 'x' has 5 values; 'x_shape' (default 28x28x1) needs 784",
    ),
    ALL_NAN: (
        ["--batch-size", "8", "--steps-per-call", "2"],
        ALL_NAN,
        EXIT_DIVERGED,
        "training diverged in steps 1-2: loss ",
    ),
    NO_PORT: ([], NO_PORT, EXIT_CONTRACT, "TF_CONFIG: cluster.worker: entry must be 'host:port'"),
    GPUS_GIVEN: ([], GPUS_GIVEN, EXIT_CONTRACT, "TFD_GPUS=1: the pod was given 1 GPU(s) but"),
    # The test machines have no GPU: fp16 is only emulated there (bf16 depends on the CPU).
    "fp16-on-cpu": (
        ["--precision", "fp16"],
        None,
        EXIT_USAGE,
        "--precision fp16: needs GPUs of compute capability >= 7.0",
    ),
}
UNEXPECTED = "unexpected"
"""Not a user error: a model whose training call raises RuntimeError (the builder itself works,
so ``--model`` validation passes and the exception reaches ``main`` unmapped)."""
BOOM_MODULE = textwrap.dedent(
    """
    import tf_keras


    class Boom(tf_keras.layers.Layer):
        def call(self, x, training=None):
            if training:
                raise RuntimeError("boom in the training call")
            return x


    def build(input_shape, num_classes):
        return tf_keras.Sequential(
            [
                tf_keras.layers.InputLayer(input_shape=input_shape),
                tf_keras.layers.Flatten(),
                Boom(),
                tf_keras.layers.Dense(num_classes),
            ]
        )
    """
)


def _write_records(path: Path, sizes: list[int]) -> None:
    """One ``tf.train.Example`` per size: an ``x`` of that many values, label 1."""
    import tensorflow as tf

    with tf.io.TFRecordWriter(str(path)) as w:
        for size in sizes:
            feature = {
                "x": tf.train.Feature(float_list=tf.train.FloatList(value=[0.5] * size)),
                "y": tf.train.Feature(int64_list=tf.train.Int64List(value=[1])),
            }
            w.write(
                tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()
            )


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each case's checkpoint directory."""
    return {name: tmp_path_factory.mktemp(name) for name in [*CASES, UNEXPECTED]}


@pytest.fixture(scope="module")
def runs(roots: dict[str, Path]) -> Iterator[dict[str, tuple[int, str]]]:
    """Every case as a real ``python -m trainer`` process, all started at once."""
    procs = {}
    cases = {name: (argv, setup) for name, (argv, setup, _, _) in CASES.items()}
    cases[UNEXPECTED] = (["--model", "tfd_boom_model:build", "--epochs", "1"], UNEXPECTED)
    for name, (argv, setup) in cases.items():
        root = roots[name]
        env = worker_envs(1, str(root))[0]
        ckpts = root / "checkpoints"
        if setup == CORRUPT_STATE:
            ckpts.mkdir()
            (ckpts / "checkpoint").write_text("this is {not a text proto\n")
        elif setup == CORRUPT_INDEX:
            ckpts.mkdir()
            (ckpts / "checkpoint").write_text('model_checkpoint_path: "ckpt-10"\n')
            (ckpts / "ckpt-10.index").write_bytes(b"\x00garbage" * 64)
            (ckpts / "ckpt-10.data-00000-of-00001").write_bytes(b"\x01" * 128)
        elif setup == "contract":
            env[contract.ENV_POD_NAME] = "tfd-worker-5"
        elif setup == BAD_RECORD:
            (root / "data").mkdir()
            _write_records(root / "data" / "part-0.tfrecord", [784] * 4)
            _write_records(root / "data" / "part-1.tfrecord", [784] * 3 + [5])
            argv = [*argv, "--dataset", str(root / "data")]
        elif setup == ALL_NAN:
            np.savez(
                root / "nan.npz", x=np.full((32, 8, 8), np.nan, "float32"), y=np.arange(32) % 4
            )
            argv = [*argv, "--dataset", str(root / "nan.npz")]
        elif setup == NO_PORT:
            env[contract.ENV_TF_CONFIG] = json.dumps(
                {"cluster": {"worker": ["localhost:2222", "tfd-worker-1"]}, "task": {"index": 0}}
            )
        elif setup == GPUS_GIVEN:
            env[contract.ENV_GPUS] = "1"
        elif setup == UNEXPECTED:
            (root / "tfd_boom_model.py").write_text(BOOM_MODULE)
            env["PYTHONPATH"] = os.pathsep.join([str(root), env.get("PYTHONPATH", "")])
        procs[name] = subprocess.Popen(
            [sys.executable, "-m", "trainer", "--on-done", "exit", *argv],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    results = {}
    try:
        for name, proc in procs.items():
            _, err = proc.communicate(timeout=120)
            results[name] = (proc.returncode, err)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
    yield results


@pytest.mark.slow  # the module's `runs` fixture starts a trainer process per case
@pytest.mark.parametrize("case", list(CASES))
def test_errors_are_one_line_and_exit_code(runs: dict[str, tuple[int, str]], case: str):
    code, stderr = runs[case]
    _, _, expected_code, text = CASES[case]
    assert code == expected_code, f"{case}: exit {code}, stderr tail: {stderr[-800:]}"
    assert "Traceback" not in stderr, f"{case}: traceback on stderr"
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("trainer: error: ") and text in last, f"{case}: {last}"


@pytest.mark.slow  # the module's `runs` fixture starts a trainer process per case
def test_a_diverged_run_saved_nothing(runs: dict[str, tuple[int, str]], roots: dict[str, Path]):
    """The all-NaN run stopped at its first call, before the first checkpoint."""
    assert runs[ALL_NAN][0] == EXIT_DIVERGED
    assert not list(roots[ALL_NAN].glob("checkpoints/ckpt-*")), "a checkpoint after the NaN loss"


@pytest.mark.slow  # the module's `runs` fixture starts a trainer process per case
def test_unexpected_error_prints_traceback_and_exits_1(runs: dict[str, tuple[int, str]]):
    """The fixture's communicate() timeout also proves the process ended (no shutdown hang)."""
    code, stderr = runs[UNEXPECTED]
    assert code == EXIT_UNEXPECTED, f"{UNEXPECTED}: exit {code}, stderr tail: {stderr[-800:]}"
    assert "Traceback (most recent call last)" in stderr, stderr[-800:]
    assert "RuntimeError: boom in the training call" in stderr, stderr[-800:]
    assert stderr.strip().splitlines()[-1] == "trainer: unexpected error (traceback above)"


@pytest.mark.slow  # one trainer process
def test_cpu_fallback_trains_without_the_given_gpus(tmp_path: Path):
    env = worker_envs(1, str(tmp_path))[0]
    env[contract.ENV_GPUS] = "1"
    argv = ["--on-done", "exit", "--allow-cpu-fallback", "--epochs", "1", "--steps-per-epoch", "2"]
    proc = subprocess.run(
        [sys.executable, "-m", "trainer", *argv], env=env, capture_output=True, text=True,
        timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-800:]
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    fallback = [e for e in events if e["event"] == "cpu_fallback"]
    assert fallback and fallback[0]["gpus_given"] == 1 and fallback[0]["gpus_seen"] == 0, events
    assert (tmp_path / contract.DONE_MARKER).exists(), "the fallback run did not finish"


def test_checkpoint_dir_required(tmp_path: Path):
    env = worker_envs(1, str(tmp_path))[0]
    env[contract.ENV_CHECKPOINT_DIR] = ""
    proc = subprocess.run(
        [sys.executable, "-m", "trainer"], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == EXIT_CONTRACT
    assert "TFD_CHECKPOINT_DIR: required" in proc.stderr
