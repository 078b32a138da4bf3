"""The run manifest, ``manifest.json``: what a run is, written at its first start, checked at every
later one.

A later start that differs in a field of :data:`RESULT_FIELDS` (dataset, model, seed, learning
rate, steps per epoch, ...) is refused before anything is written (exit 9, each field as
``old -> new``); :data:`INFO_FIELDS` (epochs, global batch, precision, image, provenance) are
recorded and logged when they change. The fields and why each is one or the other:
docs/trainer.md, "Run manifest". Imports no TensorFlow at import time.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from trainer import contract
from trainer.config import Config
from trainer.errors import DataError, RunConflictError, TrainerError
from trainer.lease import Lease, holder_identity, utc
from trainer.logs import Log
from trainer.storage import gfile, is_local, read_text, write_text

MANIFEST_FILE = "manifest.json"
VERSION = 1
RESULT_FIELDS: tuple[str, ...] = (
    "project",
    "stack",
    "app",
    "run_id",
    "dataset",
    "model",
    "seed",
    "learning_rate",
    "learning_rate_scaling",
    "steps_per_epoch",
    "eval_dataset",
)
"""A later start that differs in one of these is refused (exit 9)."""
INFO_FIELDS: tuple[str, ...] = (
    "epochs",
    "global_batch",
    "precision",
    "image",
    *contract.PROVENANCE_ANNOTATIONS,
)
"""Recorded at the first start; a difference is logged, never refused (module docstring)."""
CONTENT_HASH_BYTES = 64 << 20
"""Datasets up to this many bytes in all are fingerprinted by content (SHA-256 of every file);
larger ones by each file's size and modification time."""
DEFAULT_MODEL = "built-in CNN"
DEFAULT_LOSS = "cross-entropy"
FROM_DATA = "from the data"
_STAT_THREADS = 16


def dataset_fingerprint(
    config: Config, recorded: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """What identifies the training data of ``config``: a synthetic set's parameters, MNIST's name,
    or for files the spec, their count, bytes and a SHA-256 over each file's path, size and content
    (within :data:`CONTENT_HASH_BYTES`) or modification time (larger); ``--eval-split`` too
    (docs/trainer.md, "Run manifest"). ``recorded``: the manifest's fingerprint, if any: one of the
    same spec gives the kind without importing ``trainer.data`` (TensorFlow: seconds).

    Raises:
        DataError: the spec names no file, or the files cannot be listed or read.
    """
    out = _fingerprint(config.dataset, config.synthetic_examples, config.seed, recorded)
    if config.eval_split:
        out["eval_split"] = config.eval_split
    return out


def eval_fingerprint(config: Config, recorded: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What identifies ``--eval-dataset``, as :func:`dataset_fingerprint` does the training
    data (a synthetic one is drawn with ``seed + 1``, as ``trainer.task.sources`` loads it); without
    one, ``{"spec": ""}``. Its figures are the run's reported evaluation result.

    Raises:
        DataError: the spec names no file, or the files cannot be listed or read.
    """
    if not config.eval_dataset:
        return {"spec": ""}
    return _fingerprint(config.eval_dataset, config.synthetic_examples, config.seed + 1, recorded)


def _fingerprint(
    spec: str, examples: int, seed: int, recorded: Mapping[str, Any] | None
) -> dict[str, Any]:
    if recorded is not None and recorded.get("spec") == spec:
        synthetic, files = "examples" in recorded, "files" in recorded
    else:
        from trainer import data

        synthetic = spec == data.SYNTHETIC
        files = not synthetic and spec != data.MNIST
    out: dict[str, Any] = {"spec": spec}
    if synthetic:
        out.update(examples=examples, seed=seed)
    elif files:
        out.update(_files_fingerprint(spec))
    return out


def _files_fingerprint(spec: str) -> dict[str, Any]:
    try:
        paths = _list(spec)
        with ThreadPoolExecutor(_STAT_THREADS) as pool:  # object stores: one request per file
            stats = list(pool.map(_size_and_mtime, paths))
        total = sum(size for size, _ in stats)
        by_content = total <= CONTENT_HASH_BYTES
        digest = hashlib.sha256()
        for path, (size, mtime_ns) in zip(paths, stats, strict=True):
            mark = _content_sha256(path) if by_content else str(mtime_ns)
            digest.update(f"{path}\t{size}\t{mark}\n".encode())
    except Exception as err:  # noqa: BLE001 - OSError or tf.errors.OpError (tf imported lazily)
        raise DataError(f"--dataset {spec}: cannot read its files: {err}") from None
    if not paths:
        raise DataError(f"--dataset {spec}: no such file")
    return {"files": len(paths), "bytes": total, "by": "content" if by_content else "size+mtime",
            "sha256": digest.hexdigest()[:16]}  # fmt: skip


def _list(spec: str) -> list[str]:
    """The files trainer.data reads for ``spec``: a directory's entries, else the glob's matches
    (a plain path matches itself when it exists)."""
    if is_local(spec):
        pattern = os.path.join(spec, "*") if os.path.isdir(spec) else spec
        return sorted(p for p in glob.glob(pattern) if os.path.isfile(p))
    fs = gfile()
    return sorted(fs.glob(spec.rstrip("/") + "/*") if fs.isdir(spec) else fs.glob(spec))


def _size_and_mtime(path: str) -> tuple[int, int]:
    if is_local(path):
        st = os.stat(path)
        return st.st_size, st.st_mtime_ns
    st = gfile().stat(path)
    return int(st.length), int(st.mtime_nsec)


def _content_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") if is_local(path) else gfile().GFile(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def wanted(
    config: Config, env: Mapping[str, str], recorded: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """This start's manifest, without the fields only known once training is set up
    (``global_batch``, ``precision``). Reads the datasets' files (:func:`dataset_fingerprint`,
    :func:`eval_fingerprint`; ``recorded``: the manifest on disk, if any)."""

    def of(field: str) -> dict[str, Any] | None:
        value = (recorded or {}).get(field)
        return value if isinstance(value, dict) else None

    return {
        "version": VERSION,
        "project": env.get(contract.ENV_PROJECT, "").strip(),
        "stack": env.get(contract.ENV_STACK, "").strip(),
        "app": env.get(contract.ENV_APP, "").strip(),
        "run_id": contract.run_id_from_env(env),
        "dataset": dataset_fingerprint(config, of("dataset")),
        "model": {
            "builder": config.model or DEFAULT_MODEL,
            "loss": config.loss or DEFAULT_LOSS,
            "num_classes": config.num_classes or FROM_DATA,
        },
        "seed": config.seed,
        "learning_rate": config.learning_rate,
        "learning_rate_scaling": config.learning_rate_scaling,
        "steps_per_epoch": config.steps_per_epoch or FROM_DATA,
        "eval_dataset": eval_fingerprint(config, of("eval_dataset")),
        "epochs": config.epochs,
        "image": env.get(contract.ENV_IMAGE, "").strip(),
    }


_MISSING = object()


def _flat(value: Any, key: str) -> dict[str, Any]:
    """Nested objects as dotted keys (``dataset.sha256``), so a difference names its leaf."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_flat(v, f"{key}.{k}"))
        return out
    return {key: value}


def differences(recorded: Mapping[str, Any], now: Mapping[str, Any], fields: tuple[str, ...]
                ) -> dict[str, tuple[Any, Any]]:  # fmt: skip
    """``{dotted field: (recorded, now)}`` for each of ``fields`` that differs. The chief
    writes every field, so one the recorded manifest lacks differs: ``(none) -> now``."""
    now = json.loads(json.dumps(now))  # the types a manifest read back has (lists, floats)
    out: dict[str, tuple[Any, Any]] = {}
    for field in fields:
        old = _flat(recorded[field], field) if field in recorded else {field: _MISSING}
        new = _flat(now.get(field), field)
        for key in sorted(old.keys() | new.keys()):
            a, b = old.get(key, _MISSING), new.get(key, _MISSING)
            if a != b:
                out[key] = (a, b)
    return out


def _show(value: Any) -> str:
    return "(none)" if value is _MISSING else json.dumps(value)


def parse(text: str, where: str) -> dict[str, Any]:
    """Raises: RunConflictError naming ``where`` when the text is not a manifest."""
    try:
        doc = json.loads(text)
        if not isinstance(doc, dict) or not isinstance(doc.get("version"), int):
            raise ValueError("no version")
    except ValueError:
        raise RunConflictError(
            f"{where}: must be a JSON run manifest with a version; got {text.strip()[:200]!r}"
        ) from None
    return doc


class RunGuard:
    """The manifest check of one worker, and the chief's lease and manifest write.

    Use: :meth:`check` (every worker, read-only), then ``with guard.training(is_chief):``
    around the training, inside which the chief calls :meth:`record` once the global batch and
    precision are known and :meth:`verify` before the final files.

    ``deployment``: the token of the chief's lease holder (``trainer.lease.holder_identity``),
    the StatefulSet's ``metadata.uid`` when the worker read it at start. ``provenance``: the
    source commit and config hash the StatefulSet carries (``k8s.StatefulSetState``), recorded
    with the run (``""`` where unknown, as in a local run)."""

    def __init__(
        self,
        root: str,
        config: Config,
        env: Mapping[str, str],
        log: Log,
        deployment: str = "",
        provenance: Mapping[str, str] | None = None,
    ) -> None:
        self.root = root.rstrip("/")
        self.path = f"{self.root}/{MANIFEST_FILE}"
        self.config = config
        self.env = env
        self.log = log
        self.deployment = deployment
        self.provenance = {
            k: (provenance or {}).get(k, "") for k in contract.PROVENANCE_ANNOTATIONS
        }
        self.recorded: dict[str, Any] | None = None
        self._wanted: dict[str, Any] | None = None
        self._lease: Lease | None = None

    def wanted(self) -> dict[str, Any]:
        if self._wanted is None:
            self._wanted = wanted(self.config, self.env, self.recorded) | self.provenance
        return self._wanted

    def check(self) -> None:
        """Read the manifest, if any, and refuse a start that changes the result.

        Raises:
            RunConflictError: a result field differs (the line names each, old -> new), or the
                manifest is not one.
            DataError: the dataset's files cannot be listed or read.
            CheckpointError: the directory cannot be read.
        """
        text = read_text(self.path)
        self.recorded = None if text is None else parse(text, self.path)
        if self.recorded is None:
            return
        diff = differences(self.recorded, self.wanted(), RESULT_FIELDS)
        if diff:
            listed = "; ".join(f"{k}: {_show(a)} -> {_show(b)}" for k, (a, b) in diff.items())
            raise RunConflictError(
                f"{self.path}: run {self.recorded.get('run_id', '')!r} was started with other "
                f"settings that change its result ({listed}); nothing was written: keep the "
                "recorded settings to resume it, or use a new run id for a new run"
            )

    @contextlib.contextmanager
    def training(self, is_chief: bool) -> Iterator[None]:
        """The chief holds the lease (taken, then the manifest checked again under it) for the
        block and releases it on the way out, however the block ends; other workers only run
        the block.

        Raises:
            RunConflictError: another live chief holds the lease, or see :meth:`check`.
        """
        if not is_chief:
            yield
            return
        lease = Lease(self.root, holder_identity(self.env, self.deployment), self.log)
        lease.acquire()
        self._lease = lease
        restarting = False
        try:
            self.check()  # a manifest written before this chief held the lease counts too
            yield
        except TrainerError as err:  # a restart's chief takes its lease back at once
            restarting = err.exit_code in contract.SUPERVISOR_RESTART_CODES
            raise
        finally:
            self._lease = None
            lease.release(restarting)

    def record(self, global_batch: int, precision: str) -> None:
        """The chief writes the manifest at the run's first start; later starts log what
        changed among :data:`INFO_FIELDS`. Other workers do nothing.

        Raises:
            CheckpointError: the manifest cannot be written (exit 5; ``no space left on
                <manifest path>`` for a full volume).
        """
        if self._lease is None:
            return
        now = {**self.wanted(), "global_batch": global_batch, "precision": precision}
        if self.recorded is None:
            doc = {**now, "created_utc": utc(time.time()), "created_by": self._lease.holder}
            text = json.dumps(doc, indent=2, sort_keys=True, allow_nan=False) + "\n"
            write_text(self.path, text, "the run manifest", self._lease.holder)
            self.recorded = doc
            self.log.event("run_manifest", path=self.path, state="written")
            return
        changed = {k: [a, b] for k, (a, b) in differences(self.recorded, now, INFO_FIELDS).items()}
        self.log.event("run_manifest", path=self.path, state="matches", changed=changed)

    def verify(self) -> None:
        """Raises: RunConflictError when the chief no longer holds the lease."""
        if self._lease is not None:
            self._lease.verify()
