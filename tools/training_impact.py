"""What a preview does to a running training: nothing, one restart of every worker, or a new run.

    pulumi preview --json --stack prod > preview.json
    .venv/bin/python -m tools.training_impact preview.json    # one Markdown line

The pull-request preview workflow posts the line with the preview; ``tfd submit`` and the e2e
suite read the same verdict from the Automation API's engine events (:func:`from_engine_events`).

The verdict comes from the worker StatefulSet's old and new *inputs* (both sources carry them),
not from the diff's property paths, whose spelling differs between the CLI's JSON and the
engine events:

* its ``tf-distributed.io/run-id`` annotation changes (or it is created): a new run, step 0;
* it is replaced for another reason (an immutable field): every worker restarts and the run
  resumes from its last checkpoint;
* its pod template changes: a rollout; every worker restarts once at an agreed step and resumes;
  a template that holds a value known only at ``up`` (an image digest being rebuilt) *may* roll;
* the worker-count patch is created anew (a new run target): a finished run's workers come back
  for more epochs, or the run is resized;
* otherwise the training is not touched.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from trainer.contract import RUN_ID_ANNOTATION

STATEFULSET = "kubernetes:apps/v1:StatefulSet"
SIZE_PATCH = "kubernetes:apps/v1:StatefulSetPatch"
# The engine's placeholder for a value known only after `up` (pulumi/sdk UnknownStringValue).
UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"
_REPLACING = frozenset({"replace", "create-replacement", "delete-replaced"})


@dataclass(frozen=True)
class Change:
    """One resource step, from either source: its operation, type and old/new inputs."""

    op: str
    type: str
    urn: str
    old: Mapping[str, Any] | None
    new: Mapping[str, Any] | None


class Impact(Enum):
    """The verdicts, mildest first; a preview's verdict is the strongest of its steps'."""

    NONE = "nothing: the training is not touched"
    RESIZE = "brings the workers back or resizes the run (a new run target): it continues"
    MAYBE_ROLLOUT = (
        "may restart every worker once (a value of the pod template, such as a rebuilt image's "
        "digest, is known only at up); the run resumes from its last checkpoint"
    )
    ROLLOUT = "restarts every worker once (a rollout); the run resumes from its last checkpoint"
    RESTART = "replaces every worker; the run resumes from its last checkpoint"
    STOP = "deletes the workers: the training stops (checkpoints stay on their storage)"
    NEW_RUN = "starts a new run from step 0"


_ORDER = list(Impact)


def _type_of(urn: str) -> str:
    """``urn:pulumi:<stack>::<project>::<parent$>...<type>::<name>`` -> ``<type>``."""
    qualified = urn.split("::")[2] if urn.count("::") >= 3 else ""
    return qualified.rsplit("$", 1)[-1]


def _annotation(inputs: Mapping[str, Any] | None) -> Any:
    meta = (inputs or {}).get("metadata") or {}
    return (meta.get("annotations") or {}).get(RUN_ID_ANNOTATION)


def _template(inputs: Mapping[str, Any] | None) -> Any:
    return ((inputs or {}).get("spec") or {}).get("template")


def _holds_unknown(value: Any) -> bool:
    return UNKNOWN in json.dumps(value, default=str)


def verdict(change: Change) -> Impact:
    """What one step does to the training."""
    if change.type == SIZE_PATCH:
        return Impact.RESIZE if change.op in {"create", *_REPLACING} else Impact.NONE
    if change.type != STATEFULSET or change.op in ("same", "read", "refresh"):
        return Impact.NONE
    if change.op == "delete":
        return Impact.STOP
    if change.op == "create" or (
        change.op in _REPLACING and _annotation(change.old) != _annotation(change.new)
    ):
        return Impact.NEW_RUN
    if change.op in _REPLACING:
        return Impact.RESTART
    old, new = _template(change.old), _template(change.new)
    if old == new:
        return Impact.NONE
    return Impact.MAYBE_ROLLOUT if _holds_unknown(new) else Impact.ROLLOUT


def impact(changes: Iterable[Change]) -> Impact:
    """The strongest verdict over a preview's steps (nothing, when it has none)."""
    return max((verdict(c) for c in changes), key=_ORDER.index, default=Impact.NONE)


def from_preview_json(doc: Mapping[str, Any]) -> list[Change]:
    """The steps of ``pulumi preview --json`` (its ``steps``: ``op``, ``urn``, ``oldState`` and
    ``newState`` with their ``inputs``)."""
    out = []
    for step in doc.get("steps") or []:
        old, new = step.get("oldState") or {}, step.get("newState") or {}
        urn = step.get("urn", "")
        out.append(
            Change(
                op=str(step.get("op", "")),
                type=new.get("type") or old.get("type") or _type_of(urn),
                urn=urn,
                old=old.get("inputs") if old else None,
                new=new.get("inputs") if new else None,
            )
        )
    return out


def from_engine_events(events: Iterable[Any]) -> list[Change]:
    """The steps of ``pulumi.automation`` engine events (``resource_pre_event``)."""
    out = []
    for event in events:
        pre = getattr(event, "resource_pre_event", None)
        if pre is None:
            continue
        meta = pre.metadata
        op = meta.op.value if hasattr(meta.op, "value") else meta.op
        out.append(
            Change(
                op=str(op),
                type=meta.type,
                urn=meta.urn,
                old=meta.old.inputs if meta.old is not None else None,
                new=meta.new.inputs if meta.new is not None else None,
            )
        )
    return out


def comment_line(stack: str, verdict_: Impact) -> str:
    """The Markdown line of the pull-request comment."""
    return f"**Training on `{stack}`:** this change {verdict_.value}."


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.training_impact",
        description="Say what a `pulumi preview --json` document does to a running training.",
    )
    parser.add_argument("preview", type=Path, help="the output of pulumi preview --json")
    parser.add_argument("--stack", default="", help="the stack's name, for the line")
    args = parser.parse_args(argv)
    try:
        doc = json.loads(args.preview.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        print(
            f"error: {args.preview}: not a pulumi preview --json document: {exc}", file=sys.stderr
        )
        return 1
    if not isinstance(doc, dict):
        print(f"error: {args.preview}: not a pulumi preview --json document", file=sys.stderr)
        return 1
    print(comment_line(args.stack or "the stack", impact(from_preview_json(doc))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
