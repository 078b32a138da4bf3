"""The trainer's Kubernetes API adapter: exactly the requests of ``contract.API_CALLS``.

- GET its StatefulSet: live ``spec.replicas`` (``TFD_REPLICAS_SOURCE=api``),
  ``status.updateRevision`` (rollouts) and ``metadata.uid`` (the chief's lease holder);
- PATCH the StatefulSet's ``scale`` subresource to 0 replicas (``--on-done scale-to-zero``);
- DELETE its own pod (after a rollout stop, so the controller recreates it).

Standard library only: every request goes through :func:`_request`, which refuses anything not
in ``contract.API_CALLS``, with the pod's projected service-account token and CA bundle.
"""

from __future__ import annotations

import http.client
import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from trainer import contract
from trainer.errors import ApiError, ApiUnansweredError, ApiUnreachableError, ContractError

_TIMEOUT_S = 5.0
MERGE_PATCH = "application/merge-patch+json"
SCALE_TO_ZERO = {"spec": {"replicas": 0}}


@dataclass(frozen=True)
class StatefulSetState:
    """What the trainer reads from its StatefulSet."""

    replicas: int
    """``spec.replicas``."""
    update_revision: str
    """``status.updateRevision`` (``""`` when the controller has not set it yet)."""
    uid: str = ""
    """``metadata.uid``: new only when the StatefulSet is created again (a new deployment), the
    same for every pod it recreates; part of the chief's lease holder (``trainer.lease``).
    ``""`` when the answer has none."""
    provenance: Mapping[str, str] = field(default_factory=dict)
    """Run-manifest field -> value of its :data:`~trainer.contract.PROVENANCE_ANNOTATIONS`
    annotation (absent ones left out)."""


def _base(env: Mapping[str, str]) -> str:
    return (env.get(contract.ENV_API_URL, "").strip() or contract.DEFAULT_API_URL).rstrip("/")


def _names(env: Mapping[str, str], *keys: str) -> list[str]:
    values = [env.get(key, "").strip() for key in keys]
    for key, value in zip(keys, values, strict=True):
        if not value:
            raise ContractError(f"{key}: required for Kubernetes API calls")
    return values


def statefulset_url(env: Mapping[str, str]) -> str:
    """``{api}/apis/apps/v1/namespaces/{ns}/statefulsets/{name}`` from the contract env."""
    namespace, name = _names(env, contract.ENV_NAMESPACE, contract.ENV_STATEFULSET)
    return f"{_base(env)}/apis/apps/v1/namespaces/{namespace}/statefulsets/{name}"


def pod_url(env: Mapping[str, str]) -> str:
    """``{api}/api/v1/namespaces/{ns}/pods/{TFD_POD_NAME}``: this worker's own pod."""
    namespace, pod = _names(env, contract.ENV_NAMESPACE, contract.ENV_POD_NAME)
    return f"{_base(env)}/api/v1/namespaces/{namespace}/pods/{pod}"


def _request(
    env: Mapping[str, str],
    call: contract.ApiCall,
    url: str,
    body: Any = None,
    content_type: str = "",
    timeout_s: float = _TIMEOUT_S,
) -> Any:
    """One authenticated request; returns the decoded JSON answer.

    Raises:
        ContractError: the token or CA bundle cannot be read.
        urllib.error.HTTPError, urllib.error.URLError, OSError, http.client.HTTPException,
            ValueError: the call failed; :func:`_failure` turns these into one line.
    """
    if call not in contract.API_CALLS:  # the Role grants API_CALLS and nothing else
        raise AssertionError(f"{call} is not in contract.API_CALLS")
    token_path = env.get(contract.ENV_API_TOKEN_PATH, "") or contract.DEFAULT_API_TOKEN_PATH
    try:
        with open(token_path, encoding="utf-8") as f:
            token = f.read().strip()
    except OSError as err:
        raise ContractError(
            f"{contract.ENV_API_TOKEN_PATH}: cannot read {token_path!r}: {err}"
        ) from None
    context = None
    if url.startswith("https://"):
        ca_path = env.get(contract.ENV_API_CA_PATH, "") or contract.DEFAULT_API_CA_PATH
        try:
            context = ssl.create_default_context(cafile=ca_path)
        except (OSError, ssl.SSLError) as err:
            raise ContractError(
                f"{contract.ENV_API_CA_PATH}: cannot load {ca_path!r}: {err}"
            ) from None
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = content_type
    method = {"get": "GET", "patch": "PATCH", "delete": "DELETE"}[call.verb]
    request = urllib.request.Request(url, data=data, headers=headers, method=method)
    with urllib.request.urlopen(request, timeout=timeout_s, context=context) as resp:
        raw = resp.read()
    return json.loads(raw) if raw.strip() else {}


def _why(err: urllib.error.HTTPError) -> str:
    """``HTTP 403 Forbidden: <the API's Status message>`` on one line."""
    message = ""
    try:
        doc = json.loads(err.read() or b"{}")
        message = str(doc.get("message", "")) if isinstance(doc, dict) else ""
    except (ValueError, OSError, http.client.HTTPException):  # an error body cut short too
        pass
    text = f"HTTP {err.code} {err.reason}"
    return f"{text}: {' '.join(message.split())[:300]}" if message else text


_FAILURES = (urllib.error.URLError, OSError, http.client.HTTPException, ValueError)
"""What :func:`_request` raises when the call itself fails (``HTTPError`` is a ``URLError``)."""


def _failure(err: Exception) -> tuple[bool, str]:
    """Whether a failed request is worth another try, and why it failed, on one line.

    Worth it: no answer (connection refused or reset, DNS, timeout), an answer cut short or
    garbled on the wire (``http.client.HTTPException``, e.g. ``IncompleteRead``), or HTTP 429
    or 5xx. Not worth it: any other HTTP status (403: the Role), a certificate the CA bundle
    does not verify, or a complete answer that is not JSON.
    """
    if isinstance(err, urllib.error.HTTPError):
        return err.code == 429 or err.code >= 500, _why(err)
    if isinstance(err, http.client.HTTPException):
        return True, f"answer cut short or malformed: {err!r}"
    if isinstance(err, urllib.error.URLError | OSError):
        permanent = isinstance(getattr(err, "reason", err), ssl.SSLCertVerificationError)
        return not permanent, str(err)
    return False, str(err)


def statefulset_state(env: Mapping[str, str], timeout_s: float = _TIMEOUT_S) -> StatefulSetState:
    """``spec.replicas``, ``status.updateRevision`` and ``metadata.uid`` of this worker's
    StatefulSet.

    Raises:
        ApiUnreachableError: no answer (connection, DNS, timeout), an answer cut short, or HTTP
            429/5xx: may pass on another try.
        ContractError: the token/CA cannot be read, the call is refused, or the answer has no
            positive integer ``spec.replicas``; the message names the URL or file.
    """
    url = statefulset_url(env)
    try:
        doc = _request(env, contract.API_CALLS[0], url, timeout_s=timeout_s)
    except _FAILURES as err:
        transient, why = _failure(err)
        raise (ApiUnreachableError if transient else ContractError)(f"GET {url}: {why}") from None
    doc = doc if isinstance(doc, dict) else {}
    replicas = (doc.get("spec") or {}).get("replicas")
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
        raise ContractError(f"GET {url}: spec.replicas must be an integer >= 1; got {replicas!r}")
    revision = (doc.get("status") or {}).get("updateRevision") or ""
    meta = doc.get("metadata") or {}
    uid = meta.get("uid") or ""
    annotations = meta.get("annotations") or {}
    return StatefulSetState(
        replicas,
        revision if isinstance(revision, str) else "",
        uid.strip() if isinstance(uid, str) else "",
        {
            field_: annotations[name]
            for field_, name in contract.PROVENANCE_ANNOTATIONS.items()
            if isinstance(annotations, dict) and isinstance(annotations.get(name), str)
        },
    )


def scale_to_zero(env: Mapping[str, str], timeout_s: float = _TIMEOUT_S) -> str:
    """PATCH the StatefulSet's ``scale`` subresource to ``spec.replicas: 0``; returns the URL.

    Raises:
        ApiUnansweredError: no answer, an answer cut short, or HTTP 429/5xx: worth another try.
        ApiError: any other failure; the message names the URL and the HTTP status.
    """
    url = statefulset_url(env) + "/scale"
    _call(env, contract.API_CALLS[1], url, SCALE_TO_ZERO, MERGE_PATCH, timeout_s)
    return url


def delete_own_pod(env: Mapping[str, str], timeout_s: float = _TIMEOUT_S) -> str:
    """DELETE this worker's pod (``TFD_POD_NAME``); returns the URL. A pod already gone (404)
    is fine: it is what was asked.

    Raises:
        ApiUnansweredError: no answer, an answer cut short, or HTTP 429/5xx: worth another try.
        ApiError: any other failure; the message names the URL and the HTTP status.
    """
    url = pod_url(env)
    _call(env, contract.API_CALLS[2], url, None, "", timeout_s, ok_missing=True)
    return url


def _call(
    env: Mapping[str, str],
    call: contract.ApiCall,
    url: str,
    body: Any,
    content_type: str,
    timeout_s: float,
    ok_missing: bool = False,
) -> None:
    method = call.verb.upper()
    try:
        _request(env, call, url, body, content_type, timeout_s)
    except _FAILURES as err:
        if ok_missing and isinstance(err, urllib.error.HTTPError) and err.code == 404:
            return
        transient, why = _failure(err)
        raise (ApiUnansweredError if transient else ApiError)(f"{method} {url}: {why}") from None
