"""The Kubernetes API adapter against a fake API server: method, path, headers, body of every
request, error lines (403 names the URL and status), and that it calls only API_CALLS."""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.trainer.fake_api import FakeApi, Seen
from trainer import contract, k8s
from trainer.errors import (
    EXIT_API,
    EXIT_CONTRACT,
    ApiError,
    ApiUnansweredError,
    ApiUnreachableError,
    ContractError,
)

STS = "/apis/apps/v1/namespaces/ml/statefulsets/tfd-worker"
POD = "/api/v1/namespaces/ml/pods/tfd-worker-1"
FAKE_TIMEOUT_S = 30.0
"""Per call against the in-process fake: this 2-core machine has stalled the test process for
over 5 s (the adapter's default), which would read as a timeout here."""


@pytest.fixture
def api() -> Iterator[FakeApi]:
    fake = FakeApi(replicas=4, update_revision="tfd-worker-7d9f").start()
    yield fake
    fake.stop()


def _env(api: FakeApi, tmp_path: Path) -> dict[str, str]:
    return api.env(tmp_path / "token") | {
        contract.ENV_NAMESPACE: "ml",
        contract.ENV_STATEFULSET: "tfd-worker",
        contract.ENV_POD_NAME: "tfd-worker-1",
    }


def test_reads_replicas_and_update_revision(api: FakeApi, tmp_path: Path):
    state = k8s.statefulset_state(_env(api, tmp_path), timeout_s=FAKE_TIMEOUT_S)
    assert state == k8s.StatefulSetState(replicas=4, update_revision="tfd-worker-7d9f")
    (seen,) = api.seen
    assert (seen.method, seen.path, seen.body) == ("GET", STS, None)
    assert seen.headers["Authorization"] == "Bearer s3cret"


def test_reads_the_statefulset_uid_for_the_lease_holder(api: FakeApi, tmp_path: Path):
    api.uid = "0b6f3c1e-7a2d-4e59-9c1a-5d2f8e4b7a10"
    state = k8s.statefulset_state(_env(api, tmp_path), timeout_s=FAKE_TIMEOUT_S)
    assert state == k8s.StatefulSetState(4, "tfd-worker-7d9f", api.uid), state


def test_reads_the_provenance_annotations_for_the_run_manifest(api: FakeApi, tmp_path: Path):
    api.annotations = {
        contract.SOURCE_COMMIT_ANNOTATION: "681b4d486639d81811cd90f65530b281393e4650",
        contract.CONFIG_HASH_ANNOTATION: "0aebac87",
        "tf-distributed.io/run-id": "r1",  # not provenance: left out
    }
    state = k8s.statefulset_state(_env(api, tmp_path), timeout_s=FAKE_TIMEOUT_S)
    assert state.provenance == {
        "source_commit": "681b4d486639d81811cd90f65530b281393e4650",
        "config_hash": "0aebac87",
    }, state


def test_scale_to_zero_patches_the_scale_subresource(api: FakeApi, tmp_path: Path):
    url = k8s.scale_to_zero(_env(api, tmp_path), timeout_s=FAKE_TIMEOUT_S)
    assert url == f"{api.url}{STS}/scale"
    (seen,) = api.seen
    assert (seen.method, seen.path) == ("PATCH", f"{STS}/scale")
    assert seen.headers["Content-Type"] == "application/merge-patch+json"
    assert seen.headers["Authorization"] == "Bearer s3cret"
    assert seen.body == {"spec": {"replicas": 0}}


def test_delete_own_pod(api: FakeApi, tmp_path: Path):
    assert k8s.delete_own_pod(_env(api, tmp_path), timeout_s=FAKE_TIMEOUT_S) == f"{api.url}{POD}"
    (seen,) = api.seen
    assert (seen.method, seen.path, seen.body) == ("DELETE", POD, None)
    assert seen.headers["Authorization"] == "Bearer s3cret"
    assert "Content-Type" not in seen.headers


def test_delete_of_a_pod_already_gone_is_fine(api: FakeApi, tmp_path: Path):
    api.status["DELETE"] = 404
    k8s.delete_own_pod(_env(api, tmp_path), timeout_s=FAKE_TIMEOUT_S)
    assert len(api.calls("DELETE")) == 1


@pytest.mark.parametrize(
    ("method", "call", "path"),
    [
        ("PATCH", k8s.scale_to_zero, f"{STS}/scale"),
        ("DELETE", k8s.delete_own_pod, POD),
    ],
    ids=["scale", "delete"],
)
@pytest.mark.parametrize("status", [403, 500])
def test_failed_lifecycle_call_names_url_and_status(
    api: FakeApi, tmp_path: Path, method: str, call: object, path: str, status: int
):
    api.status[method] = status
    with pytest.raises(ApiError) as info:
        call(_env(api, tmp_path), timeout_s=FAKE_TIMEOUT_S)  # type: ignore[operator]
    assert info.value.exit_code == EXIT_API == 7
    text = str(info.value)
    assert text.startswith(f"{method} {api.url}{path}: HTTP {status} "), text
    assert f"{method} is forbidden here" in text and "\n" not in text, text


@pytest.mark.parametrize(
    ("status", "body", "match"),
    [
        (404, None, r"HTTP 404"),
        (200, {"spec": {}}, r"spec.replicas must be an integer >= 1; got None"),
        (200, {"spec": {"replicas": 0}}, r"spec.replicas must be an integer >= 1; got 0"),
        (200, {"spec": {"replicas": "2"}}, r"spec.replicas must be an integer >= 1; got '2'"),
    ],
)
def test_bad_statefulset_answers(
    api: FakeApi, tmp_path: Path, status: int, body: object, match: str, monkeypatch
):
    api.status["GET"] = status
    if body is not None:
        monkeypatch.setattr(k8s, "_request", lambda *a, **k: body)
    with pytest.raises(ContractError, match=match) as info:
        k8s.statefulset_state(_env(api, tmp_path), timeout_s=FAKE_TIMEOUT_S)
    assert info.value.exit_code == EXIT_CONTRACT


@pytest.mark.parametrize(
    ("status", "url", "cut", "retry"),
    [
        (503, None, False, True),
        (500, None, False, True),
        (429, None, False, True),
        (403, None, False, False),
        (404, None, False, False),
        (200, "http://127.0.0.1:9", False, True),  # refused: nothing listens
        (200, "http://tfd-no-such-host.invalid", False, True),  # no DNS answer
        (200, None, True, True),  # http.client.IncompleteRead: no OSError
        (503, None, True, True),  # the error's own body cut short
    ],
    ids=["503", "500", "429", "403", "404", "refused", "dns", "cut-short", "503-cut-short"],
)
def test_which_statefulset_read_failures_are_worth_another_try(
    api: FakeApi, tmp_path: Path, status: int, url: str | None, cut: bool, retry: bool
):
    api.status["GET"] = status
    if cut:
        api.cut_short.add("GET")
    env = _env(api, tmp_path) | ({contract.ENV_API_URL: url} if url else {})
    with pytest.raises(ContractError) as info:
        k8s.statefulset_state(env, timeout_s=FAKE_TIMEOUT_S)
    assert isinstance(info.value, ApiUnreachableError) is retry, repr(info.value)
    assert info.value.exit_code == EXIT_CONTRACT
    assert "\n" not in str(info.value), str(info.value)


@pytest.mark.parametrize(
    ("method", "call"),
    [("PATCH", k8s.scale_to_zero), ("DELETE", k8s.delete_own_pod)],
    ids=["scale", "delete"],
)
@pytest.mark.parametrize(
    ("status", "cut", "retry"),
    [(200, True, True), (503, False, True), (429, False, True), (403, False, False)],
    ids=["cut-short", "503", "429", "403"],
)
def test_which_lifecycle_call_failures_are_worth_another_try(
    api: FakeApi, tmp_path: Path, method: str, call: object, status: int, cut: bool, retry: bool
):
    """The lifecycle retries ApiUnansweredError; every failure is exit 7 and one line."""
    api.status[method] = status
    if cut:
        api.cut_short.add(method)
    with pytest.raises(ApiError) as info:
        call(_env(api, tmp_path), timeout_s=FAKE_TIMEOUT_S)  # type: ignore[operator]
    assert isinstance(info.value, ApiUnansweredError) is retry, repr(info.value)
    assert info.value.exit_code == EXIT_API
    text = str(info.value)
    assert text.startswith(f"{method} {api.url}/") and "\n" not in text, text
    if cut:
        assert "answer cut short or malformed: IncompleteRead(" in text, text


def test_missing_update_revision_is_empty(api: FakeApi, tmp_path: Path, monkeypatch):
    monkeypatch.setattr(k8s, "_request", lambda *a, **k: {"spec": {"replicas": 2}})
    assert (
        k8s.statefulset_state(_env(api, tmp_path), timeout_s=FAKE_TIMEOUT_S).update_revision == ""
    )


def test_missing_token(api: FakeApi, tmp_path: Path):
    env = _env(api, tmp_path) | {contract.ENV_API_TOKEN_PATH: str(tmp_path / "absent")}
    for call in (k8s.statefulset_state, k8s.scale_to_zero, k8s.delete_own_pod):
        with pytest.raises(ContractError, match=r"TFD_API_TOKEN_PATH: cannot read"):
            call(env)
    assert api.seen == []


def test_missing_ca(api: FakeApi, tmp_path: Path):
    env = _env(api, tmp_path) | {
        contract.ENV_API_URL: "https://127.0.0.1:1",
        contract.ENV_API_CA_PATH: str(tmp_path / "ca"),
    }
    with pytest.raises(ContractError, match=r"TFD_API_CA_PATH: cannot load"):
        k8s.statefulset_state(env)


def test_unreachable(api: FakeApi, tmp_path: Path):
    env = _env(api, tmp_path) | {contract.ENV_API_URL: "http://127.0.0.1:9"}
    with pytest.raises(ContractError, match=r"GET http://127.0.0.1:9/apis"):
        k8s.statefulset_state(env, timeout_s=2)
    with pytest.raises(ApiError, match=r"PATCH http://127.0.0.1:9/apis/.*/scale: "):
        k8s.scale_to_zero(env, timeout_s=2)


@pytest.mark.parametrize(
    ("missing", "url"),
    [
        (contract.ENV_NAMESPACE, k8s.statefulset_url),
        (contract.ENV_STATEFULSET, k8s.statefulset_url),
        (contract.ENV_NAMESPACE, k8s.pod_url),
        (contract.ENV_POD_NAME, k8s.pod_url),
    ],
)
def test_url_needs_identity(api: FakeApi, tmp_path: Path, missing: str, url: object):
    env = _env(api, tmp_path)
    del env[missing]
    with pytest.raises(ContractError, match=f"{missing}: required"):
        url(env)  # type: ignore[operator]


def _as_api_call(seen: Seen) -> contract.ApiCall:
    """An observed request as (apiGroup, resource, verb), the way the API server's RBAC sees it."""
    match = re.fullmatch(
        r"/(?:api/v1|apis/(?P<group>[^/]+)/v1)/namespaces/[^/]+/(?P<res>[^/]+)/[^/]+(?P<sub>/\w+)?",
        seen.path,
    )
    assert match, seen.path
    resource = match["res"] + (match["sub"] or "")
    verb = {"GET": "get", "PATCH": "patch", "DELETE": "delete"}[seen.method]
    return contract.ApiCall(match["group"] or "", resource, verb)


def test_the_adapter_calls_exactly_api_calls(api: FakeApi, tmp_path: Path):
    """Every public call of the adapter, as RBAC sees it, is in API_CALLS, and together they
    are all of it; and the module has one place that sends requests (which checks API_CALLS)."""
    env = _env(api, tmp_path)
    k8s.statefulset_state(env, timeout_s=FAKE_TIMEOUT_S)
    k8s.scale_to_zero(env, timeout_s=FAKE_TIMEOUT_S)
    k8s.delete_own_pod(env, timeout_s=FAKE_TIMEOUT_S)
    assert {_as_api_call(s) for s in api.seen} == set(contract.API_CALLS)
    source = inspect.getsource(k8s)
    assert source.count("urlopen(") == 1, "requests must all go through k8s._request"
    assert "urlopen(" in inspect.getsource(k8s._request)
    with pytest.raises(AssertionError, match="not in contract.API_CALLS"):
        k8s._request(env, contract.ApiCall("", "pods", "get"), api.url)


def test_role_rules_cover_api_calls():
    rules = contract.role_rules("tfd-worker", 3)
    assert rules == [
        {
            "apiGroups": ["apps"],
            "resources": ["statefulsets"],
            "resourceNames": ["tfd-worker"],
            "verbs": ["get"],
        },
        {
            "apiGroups": ["apps"],
            "resources": ["statefulsets/scale"],
            "resourceNames": ["tfd-worker"],
            "verbs": ["patch"],
        },
        {
            "apiGroups": [""],
            "resources": ["pods"],
            "resourceNames": ["tfd-worker-0", "tfd-worker-1", "tfd-worker-2"],
            "verbs": ["delete"],
        },
    ]
