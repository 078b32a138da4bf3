"""The trainer's flags: one typed definition of each flag's name, type, default, rule and help.

``python -m trainer`` parses its command line with :meth:`TrainerFlags.from_argv`; the Pulumi
program builds the worker container's ``args`` with :meth:`TrainerFlags.to_argv`. The field
``batch_size`` is the flag ``--batch-size``: its annotation is the type, its default the
default, and its :class:`FlagSpec` the rule and the help, so none of them is written twice.

Flags choose *what* to train; *where* (task index, peers, checkpoint location, ports) comes from
the pod environment (:mod:`trainer.contract.env`) and never from flags.
"""

from __future__ import annotations

import argparse
import functools
import typing
from collections.abc import Callable, Collection, Sequence
from dataclasses import Field, dataclass, field, fields
from typing import Any

from trainer.contract.env import ENV_CHECKPOINT_DIR
from trainer.contract.rules import (
    COLLECTIVE_TIMEOUT,
    COLLECTIVES,
    HEARTBEAT_TIMEOUT,
    LR_SCALING,
    MODULE_FUNCTION,
    ON_DONE_IDLE,
    ON_DONE_MODES,
    PRECISIONS,
    STRATEGIES,
    Interval,
    ModuleFunction,
    storage_problem,
)
from trainer.contract.usage import OneLineParser
from trainer.errors import UsageError

PROG = "python -m trainer"
ELSEWHERE = {
    "--checkpoint-dir": f"the run's directory comes from {ENV_CHECKPOINT_DIR} "
    "(python -m trainer.local --checkpoint-dir sets it)",
}
"""Flags a newcomer tries that are set another way (the near miss, --checkpoint-every, would
mislead)."""
DESCRIPTION = "Multi-worker TensorFlow training of one StatefulSet pod (or local process)."

# Bounds of the flags the stack also sets (its keys read them from here). The upper bounds are
# the stack's old ones, now the trainer's too: a value beyond them is a typo, not a run.
EPOCHS = Interval(1, 100_000)
BATCH_SIZE = Interval(1, 1_000_000)
STEPS_PER_EPOCH = Interval(0, 100_000_000, note=", 0 = examples // global batch")
CHECKPOINT_EVERY = Interval(1, 100_000_000)
# Trainer-only bounds.
POSITIVE = Interval(1)
NON_NEGATIVE = Interval(0)
CPU_DEVICES = Interval(1, 64)
SECONDS = Interval(0, 86_400, integer=False, lo_open=True, hi_open=True, unit="seconds")
LEARNING_RATE = Interval(0, 10, integer=False, lo_open=True)
EVAL_SPLIT = Interval(0, 0.5, integer=False)
FRACTION = Interval(0, 1, integer=False, lo_open=True)


Rule = Interval | ModuleFunction


@dataclass(frozen=True)
class FlagSpec:
    """What a flag's field does not say by itself: its rule or choices, and its help.

    ``help`` may use ``%(default)s`` (argparse fills in the field's default).
    """

    help: str
    rule: Rule | None = None
    choices: tuple[str, ...] = ()


_SPEC = "trainer.contract.flags"


def _flag(
    default: Any, help: str, *, rule: Rule | None = None, choices: tuple[str, ...] = ()
) -> Any:
    return field(default=default, metadata={_SPEC: FlagSpec(help, rule, choices)})


def spec_of(f: Field[Any]) -> FlagSpec:
    """The flag definition of a :class:`TrainerFlags` field (its help, rule and choices)."""
    return f.metadata[_SPEC]


class FlagError(UsageError, ValueError):
    """Flags break a rule; one line per problem: ``--<flag>: must be <rule>; got <value>``."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(problems))


def flag_name(name: str) -> str:
    """The command-line flag of a field: ``batch_size`` -> ``--batch-size``."""
    return "--" + name.replace("_", "-")


@dataclass(frozen=True)
class TrainerFlags:
    """The trainer's validated flags. Built from the command line (:meth:`from_argv`) or by the
    Pulumi program (then :meth:`to_argv` writes the container's ``args``).

    Raises:
        FlagError: on construction, naming each flag, the rule it breaks and the value.
    """

    dataset: str = _flag(
        "synthetic",
        "'synthetic' (default, learnable, deterministic by --seed), 'mnist' (downloaded once, "
        "cached under the checkpoint dir), or a .npz file / TFRecord file, glob or directory; "
        "local path or gs:// URI",
    )
    epochs: int = _flag(3, "epochs (default %(default)s)", rule=EPOCHS)
    batch_size: int = _flag(
        64,
        "examples per replica per step (default %(default)s); global batch = this x replicas "
        "(one replica per GPU, or per worker on CPU)",
        rule=BATCH_SIZE,
    )
    steps_per_epoch: int = _flag(
        0,
        "steps per epoch; 0 (default) = examples // global batch. When set, it is kept after a "
        "world-size change (the step is not converted)",
        rule=STEPS_PER_EPOCH,
    )
    checkpoint_every: int = _flag(
        200,
        "save a checkpoint every N global steps (default %(default)s); also at each epoch end",
        rule=CHECKPOINT_EVERY,
    )
    # Off by default: the step loop only copies the variables to host memory and TensorFlow's
    # async checkpoint thread writes the files (a save stalls the loop for a fraction of a
    # step instead of about a step, see docs/benchmarks.md); the trainer waits for the write
    # before every exit that announces a checkpoint, and the state file names a checkpoint only
    # once its files are complete, so a crash mid-write resumes from the previous one.
    sync_checkpoints: bool = _flag(
        False,
        "write each checkpoint on the step loop's thread (the loop waits for the files); off "
        "by default: TensorFlow's async checkpoint writes them while training goes on",
    )
    # Off by default: after each call every worker keeps a host copy of what a checkpoint
    # saves, and the workers still running write it when a peer is lost, so a kill -9
    # recomputes at most a call's steps instead of half a checkpoint interval on average.
    no_rescue_checkpoint: bool = _flag(
        False,
        "on a lost peer, resume from the last periodic checkpoint; by default the workers "
        "still running save the model as of their last call (a host copy kept after each "
        "call) and the restart resumes there",
    )
    # A quarter: a CPU worker holds the variables, the rescue copy and, while a save is in
    # flight, the save's own host copy, each the same size; the data and TensorFlow need room.
    rescue_memory_fraction: float = _flag(
        0.25,
        "the rescue copy's largest share of the container's memory limit (cgroup; the "
        "machine's memory without one), default %(default)g; a larger copy is not kept and a "
        "lost peer resumes from the last periodic checkpoint",
        rule=FRACTION,
    )
    steps_per_call: int = _flag(
        16,
        "steps run per tf.function call (default %(default)s); stop requests (SIGTERM, world "
        "size change) are agreed on between calls",
        rule=POSITIVE,
    )
    collective: str = _flag(
        "auto",
        "collective implementation (default %(default)s; nccl needs GPUs)",
        choices=COLLECTIVES,
    )
    collective_timeout: float = _flag(
        0.0,
        "seconds a collective may wait for peers before failing; 0 (default) = off, dead peers "
        "are found by the heartbeat. TensorFlow starts a thread per collective when set (meant "
        "for debugging); must exceed the slowest checkpoint write",
        rule=COLLECTIVE_TIMEOUT,
    )
    heartbeat_timeout: float = _flag(
        3.0,
        "seconds without heartbeats before a peer is declared dead (default %(default)g)",
        rule=HEARTBEAT_TIMEOUT,
    )
    model: str = _flag(
        "",
        "'module:function' returning an uncompiled tf-keras model that outputs logits "
        "(default: the built-in CNN)",
        rule=MODULE_FUNCTION,
    )
    loss: str = _flag(
        "",
        "'module:function' taking (labels, logits) and returning one loss per example "
        "(default: sparse cross-entropy from logits)",
        rule=MODULE_FUNCTION,
    )
    num_classes: int = _flag(
        0,
        "classes (logits of the default model); 0 (default) = from the data's labels",
        rule=NON_NEGATIVE,
    )
    seed: int = _flag(
        1,
        "seed of the data order, shuffling and initial weights (default %(default)s)",
        rule=NON_NEGATIVE,
    )
    deterministic: bool = _flag(
        False,
        "enable TensorFlow op determinism (slower; bit-identical runs where TF supports it)",
    )
    learning_rate: float = _flag(
        1e-3,
        "Adam learning rate (default %(default)s), see --learning-rate-scaling",
        rule=LEARNING_RATE,
    )
    learning_rate_scaling: str = _flag(
        "linear",
        "'linear' (default): --learning-rate x replicas, proportional to the global batch "
        "across resizes; 'none': --learning-rate at any world size",
        choices=LR_SCALING,
    )
    synthetic_examples: int = _flag(
        4096, "size of the synthetic dataset (default %(default)s)", rule=POSITIVE
    )
    eval_dataset: str = _flag(
        "",
        "held-out data evaluated after each epoch (same forms as --dataset); default none",
    )
    eval_split: float = _flag(
        0.0,
        "fraction of an in-memory dataset held out for evaluation instead of --eval-dataset "
        "(default 0 = none)",
        rule=EVAL_SPLIT,
    )
    tensorboard_dir: str = _flag(
        "",
        "TensorBoard summaries directory (local or gs://), written by the chief; default none",
    )
    on_done: str = _flag(
        ON_DONE_IDLE,
        "once the run is finished (after training, or finished at start): 'scale-to-zero' "
        "scales the StatefulSet to 0 replicas and waits for SIGTERM (needs API access: "
        "TFD_API_URL); 'idle' (default) serves metrics until terminated; 'exit' exits 0",
        choices=ON_DONE_MODES,
    )
    log_every: float = _flag(
        5.0, "seconds between progress log lines (default %(default)g)", rule=SECONDS
    )
    intra_op_threads: int = _flag(
        0, "TensorFlow intra-op threads; 0 (default) = TensorFlow's choice", rule=NON_NEGATIVE
    )
    cpu_devices: int = _flag(
        1,
        "split the CPU into N logical devices, one replica each (single worker only; exercises "
        "multi-device placement without GPUs); default %(default)s",
        rule=CPU_DEVICES,
    )
    replicas_poll: float = _flag(
        30.0,
        "seconds between the chief's reads of its StatefulSet (world size, rollouts) whenever "
        "Kubernetes API access is configured (default %(default)g)",
        rule=SECONDS,
    )
    precision: str = _flag(
        "auto",
        "compute precision: 'auto' (default) = bf16 where it is known faster (GPUs of compute "
        "capability >= 8.0, CPUs with AVX512-BF16 or AMX), else fp32; "
        "'fp16' adds dynamic loss scaling. Variables stay float32: checkpoints restore across "
        "changes",
        choices=PRECISIONS,
    )
    allow_emulated_precision: bool = _flag(
        False,
        "run --precision bf16/fp16 even where the hardware only emulates it (slower than fp32; "
        "for tests and comparisons)",
    )
    allow_cpu_fallback: bool = _flag(
        False,
        "train on the CPU when the pod was given GPUs (TFD_GPUS) that TensorFlow cannot see, "
        "instead of stopping with exit 3 (for nodes without a working driver, and tests)",
    )
    jit: bool = _flag(
        False,
        "compile each step's forward and backward pass with XLA (off by default: slower than "
        "TensorFlow's kernels on CPU, see docs/benchmarks.md)",
    )
    strategy: str = _flag(
        "auto",
        "'auto' (default): from the pod's shape; 'multi-worker': MultiWorkerMirroredStrategy "
        "even with one worker (measures its cost)",
        choices=STRATEGIES,
    )
    input_only: bool = _flag(
        False,
        "iterate this worker's input pipeline for the run's steps without the model, log its "
        "examples/s (event 'input_only') and exit: shows whether training is input-bound",
    )

    def __post_init__(self) -> None:
        problems: list[str] = []
        for f in fields(self):
            value = getattr(self, f.name)
            spec = spec_of(f)
            name = flag_name(f.name)
            kind = _types()[f.name]
            if kind is float and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)  # 3 is 3.0 seconds; a whole-seconds stack key gives ints
                object.__setattr__(self, f.name, value)
            if spec.rule is not None:
                ok = spec.rule.contains(value)
                rule = spec.rule.text
            elif spec.choices:
                ok = value in spec.choices
                rule = f"one of {', '.join(spec.choices)}"
            else:
                ok = isinstance(value, kind) and (kind is bool or not isinstance(value, bool))
                rule = {bool: "true or false", str: "a string"}[kind]
            if not ok:
                problems.append(f"{name}: must be {rule}; got {value!r}")
        for name in ("dataset", "eval_dataset", "tensorboard_dir"):
            where = getattr(self, name)
            why = storage_problem(where) if isinstance(where, str) else None
            if why is not None:
                problems.append(f"{flag_name(name)}: {why}; got {where!r}")
        # One place holds the evaluation data: a held-out split of --dataset or --eval-dataset.
        if self.eval_dataset and self.eval_split:
            problems.append(
                f"--eval-split: must be 0 when --eval-dataset is given; got {self.eval_split} "
                f"with --eval-dataset {self.eval_dataset}"
            )
        if problems:
            raise FlagError(problems)

    def learning_rate_for(self, replicas: int) -> float:
        """The optimizer's learning rate with ``replicas`` replicas (``--batch-size`` each)."""
        return self.learning_rate * (replicas if self.learning_rate_scaling == "linear" else 1)

    def to_argv(self, always: Collection[str] = ()) -> list[str]:
        """The command line that :meth:`from_argv` reads back as these flags.

        Every field that differs from its default, and every field named in ``always`` (the
        Pulumi program names those the stack sets, so a pod spec states them whatever the
        image's defaults), in field order. A boolean is its bare flag, present when true.

        Raises:
            ValueError: ``always`` names no field.
        """
        names = [f.name for f in fields(self)]
        unknown = sorted(set(always) - set(names))
        if unknown:
            raise ValueError(f"always: must name fields of TrainerFlags; got {unknown}")
        argv: list[str] = []
        for f in fields(self):
            value = getattr(self, f.name)
            name = flag_name(f.name)
            if isinstance(value, bool):
                if value:
                    argv.append(name)
            elif f.name in always or value != f.default:
                text = _text(value)
                # "-x" as a separate argument would read as a flag.
                argv += [f"{name}={text}"] if text.startswith("-") else [name, text]
        return argv

    @classmethod
    def from_argv(
        cls, argv: Sequence[str] | None = None, prog: str = PROG, also_known: Collection[str] = ()
    ) -> TrainerFlags:
        """Parse a command line (``None``: ``sys.argv[1:]``) into validated flags.

        Prints the problem on one line (``<prog>: error: --<flag>: ...``, no usage block) and
        exits 2 (``EXIT_USAGE``) on a bad or unknown flag; an unknown one names the closest of
        the trainer's flags and ``also_known`` (``did you mean --epochs?``). Abbreviations are
        refused: ``--epoch 2`` is an unknown flag, not ``--epochs``.
        """
        parser = build_parser(prog, also_known)
        ns = parser.parse_args(argv)
        try:
            return cls(**vars(ns))
        except FlagError as err:
            parser.error(str(err))


@functools.cache
def _types() -> dict[str, type]:
    """Each field's type (the annotations are strings under ``from __future__``)."""
    return typing.get_type_hints(TrainerFlags)


def _text(value: int | float | str) -> str:
    """A value as a command-line argument: ``3`` and ``0.5``; a whole float without ``.0``
    (``3.0`` -> ``3``, what the stack has always written); ``repr`` round-trips the rest."""
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    return str(value)


def _argument_type(rule: Rule) -> Callable[[str], Any]:
    """An argparse ``type``: the text as ``rule`` reads it; the error states the rule."""

    def parse(text: str) -> Any:
        try:
            return rule.parse(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {rule.text}; got {text!r}") from None

    return parse


def build_parser(prog: str = PROG, also_known: Collection[str] = ()) -> OneLineParser:
    """The argparse parser of :class:`TrainerFlags`: one argument per field, errors on one
    line (:class:`~trainer.contract.usage.OneLineParser`).

    ``allow_abbrev=False``: an abbreviation would make any new flag that shares its prefix
    change the meaning of existing command lines.
    """
    parser = OneLineParser(
        prog=prog,
        description=DESCRIPTION,
        allow_abbrev=False,
        also_known=also_known,
        elsewhere=ELSEWHERE,
    )
    add_flags(parser)
    return parser


def add_flags(parser: Any) -> None:
    """One argument per :class:`TrainerFlags` field on ``parser`` (or a group of another
    parser's help: the launcher lists them)."""
    for f in fields(TrainerFlags):
        spec = spec_of(f)
        kind = _types()[f.name]
        if kind is bool:
            if f.default is not False:  # pragma: no cover - a definition error, found by tests
                raise TypeError(f"{f.name}: a boolean flag must default to false")
            parser.add_argument(flag_name(f.name), action="store_true", help=spec.help)
            continue
        options: dict[str, Any] = {"default": f.default, "help": spec.help}
        if spec.choices:
            options["choices"] = spec.choices
        elif spec.rule is not None:
            options["type"] = _argument_type(spec.rule)
        parser.add_argument(flag_name(f.name), **options)
