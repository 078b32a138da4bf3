"""``tfd.kube.Cluster.snapshot`` when the API server answers a log read with an error: which
answers ``status`` reads on from and which end the command (the API objects are fakes that
answer as the kubernetes client does; the e2e suite reads a live cluster)."""

from __future__ import annotations

import json
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


REASONS = {403: "Forbidden", 500: "Internal Server Error", 503: "Service Unavailable"}


def api_error(status: int, message: str) -> ApiException:
    """As the client raises it: the API server's Status object as the body."""
    err = ApiException(status=status, reason=REASONS[status])
    err.body = json.dumps({"kind": "Status", "message": message})
    return err


def test_a_log_the_node_cannot_serve_leaves_that_worker_out_and_says_so() -> None:
    snap = cluster(api_error(500, UNREACHABLE)).snapshot()
    assert sorted(snap.logs) == [1], f"logs read: {sorted(snap.logs)}"
    assert snap.unreadable[0] == (
        f"get pods/log {NAMESPACE}/{STS}-0: HTTP 500 Internal Server Error: {UNREACHABLE}"
    ), snap.unreadable
    status = derive(snap)
    assert f"worker 0: log unreadable now: {snap.unreadable[0]}" in status.events, status.events
    assert status.reason == "workers ready; the log of worker 0 cannot be read now", status


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
