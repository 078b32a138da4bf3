"""The Kubernetes API calls the trainer makes: the Role the Pulumi program builds grants these."""

from __future__ import annotations

from typing import Any, NamedTuple


class ApiCall(NamedTuple):
    """One kind of Kubernetes API request the trainer makes (an RBAC rule's parts)."""

    api_group: str
    """``""`` is the core group."""
    resource: str
    verb: str


API_CALLS: tuple[ApiCall, ...] = (
    ApiCall("apps", "statefulsets", "get"),
    ApiCall("apps", "statefulsets/scale", "patch"),
    ApiCall("", "pods", "delete"),
)
"""Every API request the trainer's adapter (``trainer/k8s.py``) can make, and nothing else (a
test checks it). The Role grants exactly these, on the names :func:`api_resource_names` gives:

- ``get statefulsets`` (its own StatefulSet): live ``spec.replicas``, ``status.updateRevision``
  and ``metadata.uid`` (the token of the chief's lease holder);
- ``patch statefulsets/scale`` (its own StatefulSet): ``--on-done scale-to-zero``;
- ``delete pods`` (``<statefulset>-0`` .. ``<statefulset>-<max-1>``): a worker deletes its own
  pod after a rollout stop, so the controller recreates it from the new template.
"""


def api_resource_names(call: ApiCall, statefulset: str, max_replicas: int) -> list[str]:
    """The ``resourceNames`` of the Role rule for ``call``: the StatefulSet, or its pods."""
    if call.resource == "pods":
        return [f"{statefulset}-{i}" for i in range(max_replicas)]
    return [statefulset]


def role_rules(statefulset: str, max_replicas: int) -> list[dict[str, Any]]:
    """The Role's ``rules`` for :data:`API_CALLS` (one rule per call, least privilege)."""
    return [
        {
            "apiGroups": [call.api_group],
            "resources": [call.resource],
            "resourceNames": api_resource_names(call, statefulset, max_replicas),
            "verbs": [call.verb],
        }
        for call in API_CALLS
    ]
