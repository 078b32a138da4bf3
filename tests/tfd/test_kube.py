"""``tfd.kube.Cluster.snapshot`` when the API server answers a log read with an error: which
answers ``status`` reads on from and which end the command (the API objects are fakes that
answer as the kubernetes client does; the e2e suite reads a live cluster)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes.client.rest import ApiException

from tests.tfd.builders import STS, pod, sts
from tfd.errors import ClusterError, NodeUnreachableError
from tfd.kube import Cluster
from tfd.phase import derive

NAMESPACE = "tfd-stop"
UNREACHABLE = (
    'Get "https://10.244.0.1:10250/containerLogs/tfd-stop/tfd-worker-0/trainer": '
    "dial tcp 10.244.0.1:10250: connect: connection refused"
)


class FakeApps:
    def read_namespaced_stateful_set(self, name: str, namespace: str, **_: Any) -> dict:
        return {**sts(2), "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "t"}}}}


class FakeCore:
    """Worker 0's log read fails with ``error``; worker 1's returns a training line."""

    def __init__(self, error: ApiException) -> None:
        self.error = error

    def list_namespaced_pod(self, namespace: str, **_: Any) -> dict:
        return {"items": [pod(0), pod(1)]}

    def list_namespaced_event(self, namespace: str, **_: Any) -> dict:
        return {"items": []}

    def read_namespaced_pod_log(self, name: str, namespace: str, **_: Any) -> str:
        if name == f"{STS}-0":
            raise self.error
        return '{"event": "train_start", "ts": 1.0, "start_step": 0}\n'


def cluster(error: ApiException) -> Cluster:
    api = SimpleNamespace(sanitize_for_serialization=lambda obj: obj)
    c = Cluster(api, NAMESPACE, STS)
    c.core, c.apps = FakeCore(error), FakeApps()
    return c


def api_error(status: int, message: str) -> ApiException:
    err = ApiException(status=status, reason="Internal Server Error")
    err.body = f'{{"kind": "Status", "message": {message!r}}}'.replace("'", '"')
    return err


def test_a_log_the_node_cannot_serve_leaves_that_worker_out_and_says_so() -> None:
    snap = cluster(api_error(500, UNREACHABLE)).snapshot()
    assert sorted(snap.logs) == [1], f"logs read: {sorted(snap.logs)}"
    assert "connection refused" in snap.unreadable[0], snap.unreadable
    events = derive(snap).events
    assert any(e.startswith("worker 0: log unreadable now: get pods/log") for e in events), events


@pytest.mark.parametrize(
    ("status", "raised"),
    [(500, NodeUnreachableError), (503, NodeUnreachableError), (403, ClusterError)],
)
def test_which_log_errors_are_the_nodes(status: int, raised: type[ClusterError]) -> None:
    with pytest.raises(ClusterError) as caught:
        cluster(api_error(status, "no")).log(f"{STS}-0")
    assert type(caught.value) is raised, f"HTTP {status}: {type(caught.value).__name__}"


def test_a_refused_log_read_still_ends_the_status() -> None:
    with pytest.raises(ClusterError, match="HTTP 403"):
        cluster(api_error(403, "pods/log is forbidden")).snapshot()
