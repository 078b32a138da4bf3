"""The trainer's flags: one typed object, its command line both ways, and every refusal."""

from __future__ import annotations

import dataclasses
import re

import pytest

from trainer.contract.flags import FlagError, TrainerFlags, build_parser, flag_name
from trainer.contract.rules import S3_INSTEAD
from trainer.errors import EXIT_USAGE

ROUND_TRIP = {
    "defaults": TrainerFlags(),
    "stack": TrainerFlags(
        dataset="gs://b/d.npz",
        epochs=5,
        batch_size=32,
        steps_per_epoch=10,
        checkpoint_every=7,
        collective="ring",
        collective_timeout=12.5,
        heartbeat_timeout=3,
        on_done="scale-to-zero",
        precision="bf16",
    ),
    "booleans": TrainerFlags(
        deterministic=True, allow_emulated_precision=True, jit=True, input_only=True
    ),
    "fractions": TrainerFlags(
        learning_rate=3e-4, eval_split=0.1, log_every=0.05, replicas_poll=0.2, heartbeat_timeout=0.1
    ),
    "bounds": TrainerFlags(
        epochs=100_000,
        batch_size=1_000_000,
        steps_per_epoch=100_000_000,
        checkpoint_every=1,
        collective_timeout=86_399.999,
        heartbeat_timeout=86_399,
        cpu_devices=64,
        learning_rate=10,
        eval_split=0.5,
    ),
    "strings": TrainerFlags(
        dataset="-odd name.npz",  # would read as a flag as a separate argument
        model="pkg.mod:build",
        loss="pkg.loss:fn",
        eval_dataset="e.npz",
        tensorboard_dir="gs://b/tb",
        on_done="exit",
        strategy="multi-worker",
        learning_rate_scaling="none",
        num_classes=10,
        seed=0,
        intra_op_threads=2,
        steps_per_call=1,
        synthetic_examples=1,
    ),
}


@pytest.mark.parametrize("flags", ROUND_TRIP.values(), ids=ROUND_TRIP.keys())
def test_from_argv_reads_back_to_argv(flags: TrainerFlags):
    assert TrainerFlags.from_argv(flags.to_argv()) == flags


@pytest.mark.parametrize("flags", ROUND_TRIP.values(), ids=ROUND_TRIP.keys())
def test_round_trip_with_every_field_written(flags: TrainerFlags):
    every = [f.name for f in dataclasses.fields(TrainerFlags)]
    assert TrainerFlags.from_argv(flags.to_argv(always=every)) == flags


@pytest.mark.parametrize(
    ("flags", "always", "argv"),
    [
        (TrainerFlags(), (), []),
        (TrainerFlags(epochs=5), (), ["--epochs", "5"]),
        (TrainerFlags(), ("epochs", "on_done"), ["--epochs", "3", "--on-done", "idle"]),
        # Whole seconds without '.0': what the stack has always written into the pod spec.
        (TrainerFlags(heartbeat_timeout=3), ("heartbeat_timeout",), ["--heartbeat-timeout", "3"]),
        (TrainerFlags(collective_timeout=0.5), (), ["--collective-timeout", "0.5"]),
        (TrainerFlags(jit=True), ("deterministic",), ["--jit"]),  # false: absent
        (TrainerFlags(dataset="-x"), (), ["--dataset=-x"]),
        # Field order, whatever the order of ``always``.
        (
            TrainerFlags(precision="fp32"),
            ("dataset",),
            ["--dataset", "synthetic", "--precision", "fp32"],
        ),
    ],
)
def test_to_argv(flags: TrainerFlags, always: tuple[str, ...], argv: list[str]):
    assert flags.to_argv(always=always) == argv


def test_to_argv_refuses_unknown_fields():
    with pytest.raises(
        ValueError, match=r"always: must name fields of TrainerFlags; got \['epoch'\]"
    ):
        TrainerFlags().to_argv(always=["epoch"])


def test_whole_seconds_become_floats():
    flags = TrainerFlags(collective_timeout=20, heartbeat_timeout=3)
    assert (flags.collective_timeout, flags.heartbeat_timeout) == (20.0, 3.0)
    assert isinstance(flags.collective_timeout, float)


MODULE = "'module:function' with an importable module (my_model:build for ./my_model.py)"

# (field, value, message): each rule at its bounds, named by flag, rule and value.
INVALID = [
    ("epochs", 0, "--epochs: must be an integer in [1, 100000]; got 0"),
    ("epochs", 100_001, "--epochs: must be an integer in [1, 100000]; got 100001"),
    ("epochs", 2.0, "--epochs: must be an integer in [1, 100000]; got 2.0"),
    ("epochs", True, "--epochs: must be an integer in [1, 100000]; got True"),
    ("batch_size", 1_000_001, "--batch-size: must be an integer in [1, 1000000]; got 1000001"),
    (
        "steps_per_epoch",
        -1,
        "--steps-per-epoch: must be an integer in [0, 100000000], 0 = examples // global batch; "
        "got -1",
    ),
    ("checkpoint_every", 0, "--checkpoint-every: must be an integer in [1, 100000000]; got 0"),
    ("steps_per_call", 0, "--steps-per-call: must be an integer >= 1; got 0"),
    (
        "collective_timeout",
        86_400,
        "--collective-timeout: must be a number of seconds in [0, 86400), 0 = off; got 86400.0",
    ),
    (
        "collective_timeout",
        -0.5,
        "--collective-timeout: must be a number of seconds in [0, 86400), 0 = off; got -0.5",
    ),
    (
        "heartbeat_timeout",
        0,
        "--heartbeat-timeout: must be a number of seconds in (0, 86400); got 0.0",
    ),
    ("log_every", 0.0, "--log-every: must be a number of seconds in (0, 86400); got 0.0"),
    ("learning_rate", 0.0, "--learning-rate: must be a number in (0, 10]; got 0.0"),
    ("learning_rate", 10.5, "--learning-rate: must be a number in (0, 10]; got 10.5"),
    ("eval_split", 0.51, "--eval-split: must be a number in [0, 0.5]; got 0.51"),
    ("cpu_devices", 65, "--cpu-devices: must be an integer in [1, 64]; got 65"),
    ("seed", -1, "--seed: must be an integer >= 0; got -1"),
    ("model", "nomodule", "--model: must be " + MODULE + "; got 'nomodule'"),
    ("model", "/x/m.py:build", "--model: must be " + MODULE + "; got '/x/m.py:build'"),
    ("model", "m.py:build", "--model: must be " + MODULE + "; got 'm.py:build'"),
    ("loss", "m:not-an-identifier", "--loss: must be " + MODULE + "; got 'm:not-an-identifier'"),
    ("collective", "mpi", "--collective: must be one of auto, ring, nccl; got 'mpi'"),
    ("on_done", "scale", "--on-done: must be one of scale-to-zero, idle, exit; got 'scale'"),
    ("precision", "fp8", "--precision: must be one of auto, fp32, bf16, fp16; got 'fp8'"),
    ("strategy", "ps", "--strategy: must be one of auto, multi-worker; got 'ps'"),
    (
        "learning_rate_scaling",
        "sqrt",
        "--learning-rate-scaling: must be one of linear, none; got 'sqrt'",
    ),
    ("dataset", 3, "--dataset: must be a string; got 3"),
    ("dataset", "s3://b/d.npz", f"--dataset: {S3_INSTEAD}; got 's3://b/d.npz'"),
    ("eval_dataset", "s3://b/e.npz", f"--eval-dataset: {S3_INSTEAD}; got 's3://b/e.npz'"),
    ("tensorboard_dir", "s3://b/tb", f"--tensorboard-dir: {S3_INSTEAD}; got 's3://b/tb'"),
    ("jit", 1, "--jit: must be true or false; got 1"),
]


@pytest.mark.parametrize(("field", "value", "message"), INVALID)
def test_construction_refuses(field: str, value: object, message: str):
    with pytest.raises(FlagError) as info:
        TrainerFlags(**{field: value})
    assert info.value.problems == (message,)
    assert info.value.exit_code == EXIT_USAGE


def test_every_problem_is_reported_at_once():
    with pytest.raises(FlagError) as info:
        TrainerFlags(epochs=0, collective="mpi", eval_split=0.1, eval_dataset="e.npz")
    assert [p.split(":")[0] for p in info.value.problems] == [
        "--epochs",
        "--collective",
        "--eval-split",
    ]


def test_eval_split_or_eval_dataset():
    with pytest.raises(FlagError, match=r"--eval-split: must be 0 when --eval-dataset is given"):
        TrainerFlags(eval_split=0.1, eval_dataset="e.npz")


def test_defaults():
    flags = TrainerFlags.from_argv([])
    assert flags == TrainerFlags()
    assert flags.dataset == "synthetic" and flags.on_done == "idle"
    assert flags.learning_rate_scaling == "linear", "the rate follows the global batch"
    # No collective timeout by default: TensorFlow starts a thread per collective with one.
    assert flags.collective_timeout == 0


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["--epochs", "0"], r"--epochs: must be an integer in \[1, 100000\]; got '0'"),
        (["--batch-size", "x"], r"--batch-size: must be an integer in \[1, 1000000\]; got 'x'"),
        (["--collective", "mpi"], r"--collective: invalid choice: 'mpi'"),
        (
            ["--collective-timeout", "-1"],
            r"--collective-timeout: must be a number of seconds in \[0, 86400\), 0 = off; got '-1'",
        ),
        (
            ["--heartbeat-timeout", "soon"],
            r"--heartbeat-timeout: must be a number of seconds in \(0, 86400\); got 'soon'",
        ),
        (["--model", "nomodule"], r"--model: must be 'module:function' with an importable "),
        (["--model", "models/m.py:build"], r"--model: must be .*; got 'models/m.py:build'"),
        (["--on-done", "sleep"], r"--on-done: invalid choice"),
        (
            ["--on-done", "scale"],
            r"--on-done: invalid choice: 'scale' \(choose from "
            r"'scale-to-zero', 'idle', 'exit'\)",
        ),
        (["--learning-rate", "0"], r"--learning-rate: must be a number in \(0, 10\]"),
        # Not --checkpoint-every, the near miss: where the directory comes from.
        (
            ["--checkpoint-dir", "/x"],
            r"error: --checkpoint-dir: unknown flag; the run's directory comes from "
            r"TFD_CHECKPOINT_DIR \(python -m trainer.local --checkpoint-dir sets it\)$",
        ),
        (["--cpu-devices", "0"], r"--cpu-devices: must be an integer in \[1, 64\]; got '0'"),
        (["--eval-split", "0.9"], r"--eval-split: must be a number in \[0, 0.5\]; got '0.9'"),
        (
            ["--eval-split", "0.1", "--eval-dataset", "e.npz"],
            r"--eval-split: must be 0 when --eval-dataset is given; got 0.1",
        ),
        (["--learning-rate-scaling", "sqrt"], r"--learning-rate-scaling: invalid choice"),
        (["--precision", "fp8"], r"--precision: invalid choice: 'fp8'"),
        (["--strategy", "parameter-server"], r"--strategy: invalid choice"),
        # No abbreviations: a new flag sharing a prefix must not change old command lines;
        # a near miss is named.
        (["--epoch", "2"], r"error: --epoch: unknown flag; did you mean --epochs\?$"),
        (["--data", "x.npz"], r"error: --data: unknown flag; did you mean --dataset\?$"),
        (["--heartbeat", "3"], r"error: --heartbeat: unknown flag$"),
        (["--epoch=2", "--jitt"], r"--epoch: unknown .*--epochs\?; --jitt: unknown .*--jit\?$"),
        (["x.npz"], r"error: x.npz: unexpected argument \(flags are --name value\)$"),
    ],
)
def test_bad_command_lines(argv: list[str], match: str, capsys: pytest.CaptureFixture[str]):
    """One line, ``python -m trainer: error: ...``: no usage block (31 lines), which is for
    --help."""
    with pytest.raises(SystemExit) as info:
        TrainerFlags.from_argv(argv)
    assert info.value.code == EXIT_USAGE
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("python -m trainer: error: "), err
    assert re.search(match, err.strip()), err


@pytest.mark.parametrize("module", ["my_model:build", "pkg.models.cnn:build", ""])
def test_a_model_is_an_importable_module_and_a_function(module: str):
    assert TrainerFlags(model=module).model == module


def test_every_field_is_a_documented_flag():
    parser = build_parser()
    text = " ".join(parser.format_help().split())  # fills every help's %(default)s
    for field in dataclasses.fields(TrainerFlags):
        assert flag_name(field.name) in text, field.name
    assert "epochs (default 3)" in text
    assert "seconds without heartbeats before a peer is declared dead (default 3)" in text
