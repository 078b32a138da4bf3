"""The e2e harness's StatefulSet wait (``tests/e2e/harness.py``) on canned API answers."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e import harness
from tests.e2e.harness import Kube


def sts(generation: int, observed: int | None, revision: str) -> dict[str, Any]:
    status: dict[str, Any] = {"updateRevision": revision}
    if observed is not None:
        status["observedGeneration"] = observed
    return {"metadata": {"generation": generation}, "status": status}


CASES = [
    ("observed at once", [sts(2, 2, "new")], "new"),
    # What `pulumi up` leaves after an OnDelete update: the earlier spec's status.
    ("the controller sees the new spec later", [sts(2, 1, "old"), sts(2, 1, "old"),
                                                sts(2, 2, "new")], "new"),
    ("no status yet", [sts(1, None, ""), sts(1, 1, "first")], "first"),
    ("not there yet", [None, sts(1, 1, "first")], "first"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "answers", "revision"), CASES, ids=[c[0] for c in CASES])
def test_observed_statefulset_has_the_status_of_the_current_spec(
    monkeypatch: pytest.MonkeyPatch, case: str, answers: list[Any], revision: str
) -> None:
    kube = Kube()
    replies = iter(answers)
    monkeypatch.setattr(kube, "get", lambda *args: next(replies))
    monkeypatch.setattr(harness.time, "sleep", lambda seconds: None)
    live = kube.observed_statefulset("tfd-worker", "tfd-life", timeout=60)
    assert live["status"]["updateRevision"] == revision, f"{case}: {live}"


def test_a_statefulset_never_observed_fails_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    kube = Kube()
    monkeypatch.setattr(kube, "get", lambda *args: sts(3, 2, "old"))
    monkeypatch.setattr(harness.time, "sleep", lambda seconds: None)
    with pytest.raises(AssertionError, match="StatefulSet tfd-life/tfd-worker observed: not true"):
        kube.observed_statefulset("tfd-worker", "tfd-life", timeout=0.01)
