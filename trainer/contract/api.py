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

- ``get statefulsets`` (its own StatefulSet): live ``spec.replicas``, ``status.updateRevision``,
  ``metadata.uid`` (the token of the chief's lease holder) and the provenance annotations
  (:data:`PROVENANCE_ANNOTATIONS`);
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


RUN_ID_ANNOTATION = "tf-distributed.io/run-id"
"""The StatefulSet's ``runId`` (the program writes it; ``tfd`` reads the current run from it): its
change replaces the StatefulSet, a new run."""
RUN_TARGET_ANNOTATION = "tf-distributed.io/run-target"
"""On the program's worker-count patch: what the run is asked to do (run id, epochs, steps per
epoch, the worker count when no autoscaler owns it). A new value brings a finished run's workers
back; the same value leaves a finished run at zero (``infra.workers``)."""
SOURCE_COMMIT_ANNOTATION = "tf-distributed.io/source-commit"
"""The git commit of the program that last ran ``pulumi up`` (``""``: not a git checkout)."""
CONFIG_HASH_ANNOTATION = "tf-distributed.io/config-hash"
"""The SHA-256 of the stack's effective configuration (secret values left out)."""
IMAGE_DIGEST_ANNOTATION = "tf-distributed.io/image-digest"
"""The ``sha256:`` digest of the image the pod template runs (:func:`image_digest` of the
image's content id; ``""`` for a prebuilt reference by tag only)."""
PROVENANCE_ANNOTATIONS: dict[str, str] = {
    "source_commit": SOURCE_COMMIT_ANNOTATION,
    "config_hash": CONFIG_HASH_ANNOTATION,
    "image_digest": IMAGE_DIGEST_ANNOTATION,
}
"""Run-manifest field -> StatefulSet annotation. The program writes them on the StatefulSet's
own metadata, not the pod template, so a new commit or setting restarts no worker; the chief
copies them from its start-up read into the run's manifest."""


def image_digest(content_id: str) -> str:
    """The ``sha256:`` digest in an image's content id or reference (``repo@sha256:...``, or an
    image ID ``sha256:...``); ``""`` when it holds none (a reference by tag only)."""
    _, _, digest = content_id.rpartition("@")
    return digest if digest.startswith("sha256:") else ""


QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
"""Kueue's label naming the LocalQueue a workload waits in (``queueName``): on the StatefulSet,
Kueue's webhooks put it on each pod."""
QUEUE_PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
"""Kueue's label naming the WorkloadPriorityClass of a queued workload (``queuePriorityClass``)."""
QUEUE_ADMISSION_GATE = "kueue.x-k8s.io/admission"
"""The scheduling gate Kueue holds a queued workload's pods with until it admits them all."""
QUEUE_WORKLOAD_PREFIX = "statefulset-"
"""Kueue names a StatefulSet's Workload ``statefulset-<name>-<hash>`` (its events carry why the
workload waits)."""
