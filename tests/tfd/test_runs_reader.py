"""``tfd runs`` reads the records inside the cluster (tfd.runs_reader): exec into a running worker,
else a reader pod made from the prod stack's own rendered StatefulSet, always deleted."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from tests.tfd.builders import pod
from tfd import runs_reader
from tfd.errors import ClusterError, UsageError
from tools.render import render_stack

DOC = {"version": 1, "root": "/checkpoints/tf-distributed/prod", "read_utc": "x", "runs": []}


@pytest.fixture(scope="module")
def prod_sts() -> dict[str, Any]:
    """The prod stack's StatefulSet as the program renders it (4 GPU workers, a claim)."""
    (sts,) = [
        r for r in render_stack("prod").resources if r.type == "kubernetes:apps/v1:StatefulSet"
    ]
    return {"metadata": sts.inputs["metadata"], "spec": sts.inputs["spec"]}


class ApiError(Exception):
    def __init__(self, status: int, message: str = "") -> None:
        self.status, self.reason = status, "Forbidden" if status == 403 else "Error"
        self.body = json.dumps({"message": message})


class FakeResp:
    def __init__(self, out: str, err: str, code: int | None) -> None:
        self.out, self.err, self.code, self.closed = out, err, code, False

    def run_forever(self, timeout: float) -> None:
        self.timeout = timeout

    def is_open(self) -> bool:
        return self.code is None and not self.closed

    def read_stdout(self, timeout: float) -> str:
        assert timeout == 0, "a read that waits could hang on an open connection"
        return self.out

    def read_stderr(self, timeout: float) -> str:
        assert timeout == 0, "a read that waits could hang on an open connection"
        return self.err

    @property
    def returncode(self) -> int | None:
        if self.code == -1:  # the error channel without the exit code's cause
            raise KeyError("causes")
        return None if self.is_open() else self.code

    def close(self) -> None:
        self.closed = True


class FakeCore:
    """The CoreV1Api calls the reader makes; pod phases in order (the last one repeats)."""

    def __init__(self, phases: list[dict] | None = None, log: str = "", create_error=None):
        self.calls: list[tuple[str, Any]] = []
        self.phases = phases or [{"phase": "Pending"}, {"phase": "Succeeded"}]
        self.log = log or json.dumps(DOC)
        self.create_error = create_error
        self.interrupt = False

    def connect_get_namespaced_pod_exec(self, *args: Any, **kwargs: Any) -> None:
        raise AssertionError("called through stream() only")

    def create_namespaced_pod(self, namespace: str, body: dict, _request_timeout: int) -> None:
        self.calls.append(("create", body))
        if self.create_error:
            raise self.create_error

    def read_namespaced_pod(self, name: str, namespace: str, _request_timeout: int) -> dict:
        self.calls.append(("get", name))
        if self.interrupt:
            raise KeyboardInterrupt
        status = self.phases.pop(0) if len(self.phases) > 1 else self.phases[0]
        return {"status": status}

    def read_namespaced_pod_log(self, name: str, namespace: str, **kwargs: Any) -> str:
        self.calls.append(("log", (name, kwargs["container"])))
        return self.log

    def delete_namespaced_pod(self, name: str, namespace: str, **kwargs: Any) -> None:
        self.calls.append(("delete", name))


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def _reader(core: FakeCore, stream: Any = None) -> runs_reader.RunsReader:
    clock = Clock()
    return runs_reader.RunsReader(core, "tfd-prod", stream=stream, sleep=clock.sleep, clock=clock)


def test_a_running_worker_is_exec_ed_into(prod_sts: dict) -> None:
    seen: list[tuple] = []
    resp = FakeResp(json.dumps(DOC) + "\n", "", 0)

    def stream(fn: Any, name: str, namespace: str, **kwargs: Any) -> FakeResp:
        seen.append((fn, name, namespace, kwargs))
        return resp

    core = FakeCore()
    pods = [pod(0, phase="Pending"), pod(1), pod(2)]
    doc = _reader(core, stream).read(prod_sts, pods)
    ((fn, name, namespace, kwargs),) = seen
    assert fn == core.connect_get_namespaced_pod_exec
    assert (name, namespace) == ("tfd-worker-1", "tfd-prod")  # the first one running
    assert kwargs["container"] == "trainer" and kwargs["command"] == list(
        runs_reader.READER_COMMAND
    )
    assert kwargs["stdout"] and kwargs["stderr"] and not kwargs["stdin"] and not kwargs["tty"]
    assert doc == {**DOC, "read_by": "exec tfd-worker-1"} and resp.closed
    assert core.calls == [], "no pod is created while a worker runs"


@pytest.mark.parametrize(
    ("out", "err", "code", "words"),
    [
        ("", "trainer.run_list: error: /c: cannot list the runs: denied\n", 5,
         "exited 5: trainer.run_list: error: /c: cannot list the runs: denied"),
        ("", "Traceback\nModuleNotFoundError: No module named trainer.run_list\n", 1,
         "the image has no trainer.run_list"),
        ("", "", None, "did not end within 180 s"),
        ("not json\n", "", 0, "no run records in its output"),
        ("", "exec failed", -1, "the reader failed: KeyError('causes'): exec failed"),
    ],
    ids=["reader error", "old image", "no end", "no document", "no exit code"],
)  # fmt: skip
def test_an_exec_that_fails_is_one_line(
    prod_sts: dict, out: str, err: str, code: int | None, words: str
) -> None:
    reader = _reader(FakeCore(), lambda *a, **k: FakeResp(out, err, code))
    with pytest.raises(ClusterError) as caught:
        reader.read(prod_sts, [pod(0)])
    assert words in str(caught.value) and "\n" not in str(caught.value), caught.value
    assert str(caught.value).startswith("create pods/exec tfd-prod/tfd-worker-0: ")


def test_without_a_running_worker_a_reader_pod_is_made_from_the_template(prod_sts: dict) -> None:
    core = FakeCore(log="TF notice line\n" + json.dumps(DOC) + "\n")
    stopped = [pod(0, phase="Pending", unscheduled="0/1 nodes"), pod(1, deleting=True)]
    doc = _reader(core).read(prod_sts, stopped)
    (kind, body), *rest = core.calls
    assert kind == "create"
    name = body["metadata"]["name"]
    assert doc == {**DOC, "read_by": f"pod {name}"}
    assert name.startswith("tfd-worker-runs-")
    assert rest[-1] == ("delete", name) and ("log", (name, "trainer")) in rest
    template = prod_sts["spec"]["template"]
    spec, (container,) = body["spec"], body["spec"]["containers"]
    (worker,) = template["spec"]["containers"]
    assert "nvidia.com/gpu" in json.dumps(worker["resources"]), "the prod workers have GPUs"
    assert "nvidia.com/gpu" not in json.dumps(container["resources"]), container["resources"]
    # Kept: a cluster whose only nodes are tainted GPU nodes still schedules the reader.
    assert spec["tolerations"] == template["spec"]["tolerations"], spec
    assert spec["restartPolicy"] == "Never", spec
    assert spec["activeDeadlineSeconds"] == runs_reader.READER_DEADLINE_S, spec
    assert container["command"] == list(runs_reader.READER_COMMAND) and container["args"] == []
    assert container["resources"] == {
        "requests": runs_reader.READER_REQUESTS,
        "limits": runs_reader.READER_LIMITS,
    }, container["resources"]
    for probe in ("startupProbe", "livenessProbe", "readinessProbe", "ports"):
        assert probe not in container, f"reader container: {probe} kept"
    assert "nodeSelector" not in spec, "the reader needs no GPU node"
    # Everything the records need is the workers' own.
    for key in ("image", "env", "volumeMounts", "securityContext", "imagePullPolicy"):
        assert container[key] == worker[key], key
    for key in ("serviceAccountName", "securityContext", "volumes"):
        assert spec[key] == template["spec"][key], key
    labels, selector = body["metadata"]["labels"], prod_sts["spec"]["selector"]["matchLabels"]
    assert labels["app.kubernetes.io/component"] == "runs-reader", labels
    assert any(labels.get(k) != v for k, v in selector.items()), "counted as a worker"
    assert {**labels, runs_reader.COMPONENT_LABEL: "worker"} == template["metadata"]["labels"]


def test_the_reader_asks_no_more_than_one_worker(prod_sts: dict) -> None:
    small = copy.deepcopy(prod_sts)
    (worker,) = small["spec"]["template"]["spec"]["containers"]
    worker["resources"] = {"requests": {"cpu": "50m", "memory": "128Mi"},
                           "limits": {"cpu": "500m", "memory": "512Mi"}}  # fmt: skip
    body = runs_reader.reader_pod(small, "r")
    assert body["spec"]["containers"][0]["resources"] == {
        "requests": {"cpu": "100m", "memory": "256Mi"},
        "limits": {"cpu": "500m", "memory": "512Mi"},
    }


def test_a_reader_that_would_match_the_selector_is_not_created(prod_sts: dict) -> None:
    odd = copy.deepcopy(prod_sts)
    odd["spec"]["selector"]["matchLabels"] = {"app.kubernetes.io/name": "tf-distributed"}
    with pytest.raises(UsageError, match="would be counted as a worker"):
        runs_reader.reader_pod(odd, "r")


@pytest.mark.parametrize(
    ("phases", "log", "words"),
    [
        ([{"phase": "Failed", "containerStatuses": [
            {"state": {"terminated": {"exitCode": 5, "reason": "Error"}}}]}],
         "trainer.run_list: error: gs://b/p/s: cannot list the runs: timeout\n",
         "Failed (exit 5 (Error)): trainer.run_list: error: gs://b/p/s: cannot list"),
        ([{"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
           "message": "0/2 nodes are available: insufficient memory"}]}], "",
         "Pending (not ended within 180 s (not scheduled: 0/2 nodes are available"),
    ],
    ids=["reader error", "never scheduled"],
)  # fmt: skip
def test_a_reader_pod_that_fails_is_one_line_and_deleted(
    prod_sts: dict, phases: list, log: str, words: str
) -> None:
    core = FakeCore(phases, log=log or "\n")
    with pytest.raises(ClusterError) as caught:
        _reader(core).read(prod_sts, [])
    assert words in str(caught.value) and "\n" not in str(caught.value), caught.value
    assert core.calls[-1][0] == "delete", core.calls


def test_the_reader_pod_is_deleted_on_ctrl_c(prod_sts: dict) -> None:
    core = FakeCore()
    core.interrupt = True
    with pytest.raises(KeyboardInterrupt):
        _reader(core).read(prod_sts, [])
    assert [c[0] for c in core.calls] == ["create", "get", "delete"], core.calls


def test_a_refused_create_is_one_line_naming_it(prod_sts: dict) -> None:
    core = FakeCore(create_error=ApiError(403, 'pods is forbidden: User "u" cannot create'))
    with pytest.raises(ClusterError) as caught:
        _reader(core).read(prod_sts, [])
    message = str(caught.value)
    assert message.startswith("create pod tfd-prod/tfd-worker-runs-") and "HTTP 403" in message
    assert "cannot create" in message, message
    assert [c[0] for c in core.calls] == ["create"], "nothing to delete"


def test_a_quota_held_by_crash_looping_workers_says_what_frees_it(prod_sts: dict) -> None:
    message = "exceeded quota: tfd-workers, requested: pods=1, used: pods=4, limited: pods=4"
    core = FakeCore(create_error=ApiError(403, message))
    looping = [pod(n, waiting="CrashLoopBackOff", last_exit=5) for n in range(4)]
    with pytest.raises(ClusterError) as caught:
        _reader(core).read(prod_sts, looping)
    assert str(caught.value).endswith("pods=4; the workers' pods hold the namespace quota: tfd "
                                      "stop frees them"), caught.value  # fmt: skip
