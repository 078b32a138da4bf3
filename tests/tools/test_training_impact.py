"""What a preview does to a running training, from the worker StatefulSet's old and new inputs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tools import training_impact as ti
from tools.training_impact import Change, Impact

PROJECT_URN = "urn:pulumi:prod::tf-distributed::tfd:infra:Stack$tfd:infra:Workers$"
STS_URN = PROJECT_URN + "kubernetes:apps/v1:StatefulSet::tfd"
PATCH_URN = PROJECT_URN + "kubernetes:apps/v1:StatefulSetPatch::tfd-size-0123456789"


def sts(run_id: str = "r1", image: str = "trainer@sha256:aa", replicas: int = 2) -> dict[str, Any]:
    return {
        "metadata": {"name": "tfd-worker", "annotations": {ti.RUN_ID_ANNOTATION: run_id}},
        "spec": {
            "replicas": replicas,
            "template": {"spec": {"containers": [{"name": "trainer", "image": image}]}},
        },
    }


def change(op: str, old: Any, new: Any, type_: str = ti.STATEFULSET) -> Change:
    return Change(op=op, type=type_, urn=STS_URN, old=old, new=new)


@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        ([], Impact.NONE),
        ([change("same", sts(), sts())], Impact.NONE),
        # spec.replicas is the HPA's and the patch's: not a change of the training
        ([change("update", sts(), sts(replicas=3))], Impact.NONE),
        ([change("update", sts(), sts(image="trainer@sha256:bb"))], Impact.ROLLOUT),
        ([change("update", sts(), sts(image=ti.UNKNOWN))], Impact.MAYBE_ROLLOUT),
        ([change("replace", sts("r1"), sts("r2"))], Impact.NEW_RUN),
        ([change("replace", sts(), sts())], Impact.RESTART),
        ([change("create", None, sts())], Impact.NEW_RUN),
        ([change("delete", sts(), None)], Impact.STOP),
        ([change("create", None, {}, ti.SIZE_PATCH)], Impact.RESIZE),
        ([change("delete", {}, None, ti.SIZE_PATCH)], Impact.NONE),  # the old target's patch
        # The strongest verdict wins, whatever the order of the steps.
        (
            [
                change("create", None, {}, ti.SIZE_PATCH),
                change("replace", sts("r1"), sts("r2")),
                change("update", sts(), sts(image="x")),
            ],
            Impact.NEW_RUN,
        ),
        ([change("update", {}, {"x": 1}, "kubernetes:core/v1:ConfigMap")], Impact.NONE),
    ],
)
def test_the_verdict_of_a_preview(steps: list[Change], expected: Impact):
    assert ti.impact(steps) is expected, [(s.op, s.type) for s in steps]


def test_a_cli_preview_document_is_read_from_its_states(tmp_path: Path, capsys):
    """The shape `pulumi preview --json` prints (PreviewDigest: steps with op, urn and the
    old/new states' inputs)."""
    doc = {
        "steps": [
            {"op": "same", "urn": PROJECT_URN + "kubernetes:core/v1:Service::tfd"},
            {
                "op": "update",
                "urn": STS_URN,
                "oldState": {"type": ti.STATEFULSET, "inputs": sts()},
                "newState": {"type": ti.STATEFULSET, "inputs": sts(image="trainer@sha256:bb")},
                "diffReasons": ["spec"],
                "detailedDiff": {"spec.template.spec.containers[0].image": {"kind": "update"}},
            },
            {"op": "create", "urn": PATCH_URN, "newState": {"inputs": {}}},
        ],
        "changeSummary": {"same": 1, "update": 1, "create": 1},
    }
    changes = ti.from_preview_json(doc)
    assert [c.type for c in changes] == [
        "kubernetes:core/v1:Service",  # from the URN when the step has no state
        ti.STATEFULSET,
        ti.SIZE_PATCH,
    ]
    path = tmp_path / "preview.json"
    path.write_text(json.dumps(doc))
    assert ti.main([str(path), "--stack", "prod"]) == 0
    assert capsys.readouterr().out.strip() == (
        f"**Training on `prod`:** this change {Impact.ROLLOUT.value}."
    )


@pytest.mark.parametrize("text", ["", "[]", "{not json"])
def test_a_document_that_is_no_preview_is_one_line(tmp_path: Path, capsys, text: str):
    path = tmp_path / "preview.json"
    path.write_text(text)
    assert ti.main([str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}: not a pulumi preview --json document"), err
    assert len(err.strip().splitlines()) == 1
