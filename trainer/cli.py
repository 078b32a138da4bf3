"""Command line of the trainer: ``python -m trainer [flags]``.

Flags choose *what* to train; *where* (task index, peers, checkpoint location, ports) comes from
the pod environment contract (:mod:`trainer.contract`) and never from flags. ``main`` maps every
:class:`~trainer.errors.TrainerError` to its exit code with one line on stderr, no traceback; any
other exception prints its traceback and exits ``EXIT_UNEXPECTED`` (1).
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import TypeVar

from trainer.config import LR_SCALING, ON_DONE, PRECISIONS, STRATEGIES, Config
from trainer.contract import COLLECTIVES
from trainer.errors import EXIT_OK, EXIT_UNEXPECTED, EXIT_USAGE, TrainerError

T = TypeVar("T", int, float)


def _bounded(cast: Callable[[str], T], rule: str, ok: Callable[[T], bool]) -> Callable[[str], T]:
    """An argparse ``type``: ``cast`` the text, then require ``ok``; the error states ``rule``."""

    def parse(text: str) -> T:
        try:
            value = cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {rule}; got {text!r}") from None
        if not ok(value):
            raise argparse.ArgumentTypeError(f"must be {rule}; got {text!r}")
        return value

    return parse


_positive_int = _bounded(int, "an integer >= 1", lambda v: v >= 1)
_non_negative_int = _bounded(int, "an integer >= 0", lambda v: v >= 0)
_positive_seconds = _bounded(float, "a number of seconds in (0, 86400)", lambda v: 0 < v < 86_400)
_seconds_or_off = _bounded(
    float, "a number of seconds in [0, 86400), 0 = off", lambda v: 0 <= v < 86_400
)
_fraction = _bounded(float, "a number in [0, 0.5]", lambda v: 0 <= v <= 0.5)
_cpu_devices = _bounded(int, "an integer in [1, 64]", lambda v: 1 <= v <= 64)
_learning_rate = _bounded(float, "a number in (0, 10]", lambda v: 0 < v <= 10)


def _model_spec(text: str) -> str:
    if not text:  # the default: the built-in CNN
        return text
    module, sep, func = text.partition(":")
    if not sep or not module or not func.isidentifier():
        raise argparse.ArgumentTypeError(f"must be 'module:function'; got {text!r}")
    return text


def build_parser(prog: str = "python -m trainer") -> argparse.ArgumentParser:
    """The trainer's flags. Pod manifests and the local launcher pass these names."""
    p = argparse.ArgumentParser(
        prog=prog,
        description="Multi-worker TensorFlow training of one StatefulSet pod (or local process).",
    )
    add = p.add_argument
    add(
        "--dataset",
        default=Config.dataset,
        help="'synthetic' (default, learnable, deterministic by --seed), 'mnist' (downloaded "
        "once, cached under the checkpoint dir), or a .npz file / TFRecord file, glob or "
        "directory; local path or gs:// s3:// URI",
    )
    add("--epochs", type=_positive_int, default=Config.epochs, help="epochs (default 3)")
    add(
        "--batch-size",
        type=_positive_int,
        default=Config.batch_size,
        help="examples per replica per step (default 64); global batch = this x replicas "
        "(one replica per GPU, or per worker on CPU)",
    )
    add(
        "--steps-per-epoch",
        type=_non_negative_int,
        default=Config.steps_per_epoch,
        help="steps per epoch; 0 (default) = examples // global batch. When set, it is kept "
        "after a world-size change (the step is not converted)",
    )
    add(
        "--checkpoint-every",
        type=_positive_int,
        default=Config.checkpoint_every,
        help="save a checkpoint every N global steps (default 200); also at each epoch end",
    )
    add(
        "--steps-per-call",
        type=_positive_int,
        default=Config.steps_per_call,
        help="steps run per tf.function call (default 16); stop requests (SIGTERM, world size "
        "change) are agreed on between calls",
    )
    add(
        "--collective",
        choices=COLLECTIVES,
        default=Config.collective,
        help="collective implementation (default auto; nccl needs GPUs)",
    )
    add(
        "--collective-timeout",
        type=_seconds_or_off,
        default=Config.collective_timeout,
        help="seconds a collective may wait for peers before failing; 0 (default) = off, dead "
        "peers are found by the heartbeat. TensorFlow starts a thread per collective when set "
        "(meant for debugging); must exceed the slowest checkpoint write",
    )
    add(
        "--heartbeat-timeout",
        type=_positive_seconds,
        default=Config.heartbeat_timeout,
        help="seconds without heartbeats before a peer is declared dead (default 3)",
    )
    add(
        "--model",
        type=_model_spec,
        default=Config.model,
        help="'module:function' returning an uncompiled tf-keras model that outputs logits "
        "(default: the built-in CNN)",
    )
    add(
        "--loss",
        type=_model_spec,
        default=Config.loss,
        help="'module:function' taking (labels, logits) and returning one loss per example "
        "(default: sparse cross-entropy from logits)",
    )
    add(
        "--num-classes",
        type=_non_negative_int,
        default=Config.num_classes,
        help="classes (logits of the default model); 0 (default) = from the data's labels",
    )
    add(
        "--seed",
        type=_non_negative_int,
        default=Config.seed,
        help="seed of the data order, shuffling and initial weights (default 1)",
    )
    add(
        "--deterministic",
        action="store_true",
        help="enable TensorFlow op determinism (slower; bit-identical runs where TF supports it)",
    )
    add(
        "--learning-rate",
        type=_learning_rate,
        default=Config.learning_rate,
        help="Adam learning rate (default 0.001), see --learning-rate-scaling",
    )
    add(
        "--learning-rate-scaling",
        choices=LR_SCALING,
        default=Config.learning_rate_scaling,
        help="'linear' (default): --learning-rate x replicas, proportional to the global batch "
        "across resizes; 'none': --learning-rate at any world size",
    )
    add(
        "--synthetic-examples",
        type=_positive_int,
        default=Config.synthetic_examples,
        help="size of the synthetic dataset (default 4096)",
    )
    add(
        "--eval-dataset",
        default=Config.eval_dataset,
        help="held-out data evaluated after each epoch (same forms as --dataset); default none",
    )
    add(
        "--eval-split",
        type=_fraction,
        default=Config.eval_split,
        help="fraction of an in-memory dataset held out for evaluation instead of "
        "--eval-dataset (default 0 = none)",
    )
    add(
        "--tensorboard-dir",
        default=Config.tensorboard_dir,
        help="TensorBoard summaries directory (local, gs://, s3://), written by the chief; "
        "default none",
    )
    add(
        "--on-done",
        choices=ON_DONE,
        default=Config.on_done,
        help="once the run is finished (after training, or finished at start): 'scale-to-zero' "
        "scales the StatefulSet to 0 replicas and waits for SIGTERM (needs API access: "
        "TFD_API_URL); 'idle' (default) serves metrics until terminated; 'exit' exits 0",
    )
    add(
        "--log-every",
        type=_positive_seconds,
        default=Config.log_every,
        help="seconds between progress log lines (default 5)",
    )
    add(
        "--intra-op-threads",
        type=_non_negative_int,
        default=Config.intra_op_threads,
        help="TensorFlow intra-op threads; 0 (default) = TensorFlow's choice",
    )
    add(
        "--cpu-devices",
        type=_cpu_devices,
        default=Config.cpu_devices,
        help="split the CPU into N logical devices, one replica each (single worker only; "
        "exercises multi-device placement without GPUs); default 1",
    )
    add(
        "--replicas-poll",
        type=_positive_seconds,
        default=Config.replicas_poll,
        help="seconds between the chief's reads of its StatefulSet (world size, rollouts) "
        "whenever Kubernetes API access is configured (default 30)",
    )
    add(
        "--precision",
        choices=PRECISIONS,
        default=Config.precision,
        help="compute precision: 'auto' (default) = bf16 where the hardware has it natively "
        "(GPUs of compute capability >= 8.0, CPUs with AVX512-BF16/AMX), else fp32; 'fp16' "
        "adds dynamic loss scaling. Variables stay float32: checkpoints restore across changes",
    )
    add(
        "--allow-emulated-precision",
        action="store_true",
        help="run --precision bf16/fp16 even where the hardware only emulates it (slower than "
        "fp32; for tests and comparisons)",
    )
    add(
        "--jit",
        action="store_true",
        help="compile each step's forward and backward pass with XLA (off by default: slower "
        "than TensorFlow's kernels on CPU, see docs/benchmarks.md)",
    )
    add(
        "--strategy",
        choices=STRATEGIES,
        default=Config.strategy,
        help="'auto' (default): from the pod's shape; 'multi-worker': MultiWorkerMirroredStrategy "
        "even with one worker (measures its cost)",
    )
    add(
        "--input-only",
        action="store_true",
        help="iterate this worker's input pipeline for the run's steps without the model, log "
        "its examples/s (event 'input_only') and exit: shows whether training is input-bound",
    )
    return p


def parse_args(argv: Sequence[str] | None = None) -> Config:
    """Parse and validate flags. argparse exits with code 2 (``EXIT_USAGE``) on bad flags."""
    parser = build_parser()
    ns = parser.parse_args(argv)
    if ns.eval_dataset and ns.eval_split:
        parser.error(
            f"--eval-split: must be 0 when --eval-dataset is given; got {ns.eval_split} "
            f"with --eval-dataset {ns.eval_dataset}"
        )
    return Config(**vars(ns))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the trainer; returns (or exits with) the documented exit code."""
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    config = parse_args(argv)
    try:
        from trainer.lifecycle import run

        code = run(config, os.environ)
    except TrainerError as err:
        _hard_exit(err.exit_code, f"trainer: error: {err}")
    except KeyboardInterrupt:
        _hard_exit(EXIT_USAGE, "trainer: interrupted")
    except Exception:  # noqa: BLE001 - a bug or an unmapped TensorFlow error (OOM, internal)
        # The traceback is what a bug report needs; then the same forced exit as for known
        # errors, since TensorFlow's threads can hang a normal interpreter shutdown.
        traceback.print_exc()
        _hard_exit(EXIT_UNEXPECTED, "trainer: unexpected error (traceback above)")
    _hard_exit(code if code is not None else EXIT_OK, "")
    return code  # pragma: no cover - _hard_exit does not return


def _hard_exit(code: int, message: str) -> None:
    """Flush and leave without Python's shutdown sequence.

    After a collective failure TensorFlow's gRPC and coordination threads can block interpreter
    shutdown (thread joins, atexit), so a worker that must exit would hang instead.
    """
    if message:
        print(message, file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
