"""The StatefulSet decision (continue / restart at another size / rollout) and the watch that
applies it."""

from __future__ import annotations

import http.client
import io
import json
from pathlib import Path

import pytest

from tests.trainer.fake_api import FakeApi
from trainer import contract, k8s
from trainer.errors import ContractError
from trainer.logs import Log
from trainer.watch import Decision, StatefulSetWatch, decide

C, W, R = Decision.CONTINUE, Decision.RESTART_WORLD, Decision.ROLLOUT


@pytest.mark.parametrize(
    ("world", "live", "update", "own", "expected"),
    [
        (2, 2, "rev-a", "rev-a", C),  # nothing changed
        (2, None, "rev-a", "rev-a", C),  # TFD_REPLICAS_SOURCE=env: size not watched
        (2, None, "rev-b", "rev-a", R),  # new template, size not watched
        (2, 3, "rev-a", "rev-a", W),  # autoscaler added a worker
        (3, 2, "rev-a", "rev-a", W),  # removed one
        (2, 3, "rev-b", "rev-a", R),  # both: the recreated pods read the new size anyway
        (2, 2, "", "rev-a", C),  # the controller has not set updateRevision yet
        (2, 2, "rev-b", "", C),  # no TFD_POD_REVISION: rollouts are not detected
        (2, 3, "", "", W),
    ],
)
def test_decide(world: int, live: int | None, update: str, own: str, expected: Decision):
    got = decide(world, live, update, own)
    assert got is expected, f"world {world}, live {live}, update {update!r}, own {own!r}: {got}"


def _watch(source: str, own: str, reads: list[object]) -> tuple[StatefulSetWatch, io.StringIO]:
    env = {contract.ENV_REPLICAS_SOURCE: source, contract.ENV_POD_REVISION: own}

    def read(_env: object) -> k8s.StatefulSetState:
        item = reads.pop(0)
        if isinstance(item, Exception):
            raise item
        return item  # type: ignore[return-value]

    stream = io.StringIO()
    return StatefulSetWatch(env, 2, 0.01, Log(0, stream), read), stream


@pytest.mark.parametrize(
    ("source", "state", "event"),
    [
        ("api", k8s.StatefulSetState(3, "rev-a"), "world_changed"),
        ("env", k8s.StatefulSetState(3, "rev-a"), None),
        ("env", k8s.StatefulSetState(2, "rev-b"), "rollout"),
    ],
)
def test_watch_sets_the_matching_flag(source: str, state: k8s.StatefulSetState, event: str):
    watch, stream = _watch(source, "rev-a", [])
    watch.check(state)
    flags = {"world_changed": watch.world_changed.is_set(), "rollout": watch.rollout.is_set()}
    assert flags == {k: k == event for k in flags}, flags
    if event:
        (line,) = stream.getvalue().splitlines()
        assert json.loads(line)["event"] == "warning"


def test_watch_thread_survives_a_failed_read_then_stops_at_a_rollout():
    reads = [
        ContractError("GET http://x: HTTP 500"),
        k8s.StatefulSetState(2, "rev-a"),
        k8s.StatefulSetState(2, "rev-b"),
    ]
    watch, stream = _watch("api", "rev-a", reads)
    watch.start()
    assert watch.rollout.wait(60), stream.getvalue()
    assert not watch.world_changed.is_set()
    messages = [json.loads(x)["message"] for x in stream.getvalue().splitlines()]
    assert messages[0] == "StatefulSet check failed: GET http://x: HTTP 500", messages
    assert messages[1].startswith("rollout: StatefulSet revision rev-b, this pod rev-a"), messages
    assert reads == []


def test_watch_thread_survives_any_error():
    """A truncated answer (http.client.IncompleteRead, no OSError) or any other surprise is a
    warning naming it; the next poll still sees the rollout."""
    reads = [
        http.client.IncompleteRead(b"{", 10),
        RuntimeError("boom"),
        k8s.StatefulSetState(2, "rev-b"),
    ]
    watch, stream = _watch("api", "rev-a", reads)
    watch.start()
    assert watch.rollout.wait(60), stream.getvalue()
    messages = [json.loads(x)["message"] for x in stream.getvalue().splitlines()]
    assert messages[:2] == [
        "StatefulSet check failed: IncompleteRead(1 bytes read, 10 more expected)",
        "StatefulSet check failed: RuntimeError('boom')",
    ], messages
    assert reads == []


def test_watch_thread_survives_a_truncated_api_answer(api: FakeApi, tmp_path: Path):
    """Against the fake API: the first answer is cut short, the watch goes on and sees the
    rollout in the next one."""
    api.update_revision = "rev-b"
    api.cut_short.add("GET")

    def answer_in_full_from_now_on(seen: object) -> None:
        if len(api.seen) >= 1:
            api.cut_short.discard("GET")

    api.on_request = answer_in_full_from_now_on
    env = api.env(tmp_path / "token") | {
        contract.ENV_NAMESPACE: "ml",
        contract.ENV_STATEFULSET: "tfd-worker",
        contract.ENV_POD_REVISION: "rev-a",
    }
    stream = io.StringIO()
    watch = StatefulSetWatch(env, 1, 0.01, Log(0, stream)).start()
    assert watch.rollout.wait(30), stream.getvalue()
    first = json.loads(stream.getvalue().splitlines()[0])["message"]
    assert first.startswith("StatefulSet check failed: GET ") and "cut short" in first, first
    assert len(api.calls("GET")) >= 2
