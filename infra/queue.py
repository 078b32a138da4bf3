"""The cluster's queue (Kueue, docs/queue.md): the workers' queue labels and the stack's own
LocalQueue.

A StatefulSet labelled with a LocalQueue is managed by Kueue: its pods wait behind Kueue's
admission gate until the LocalQueue's ClusterQueue has quota for all of them. The ClusterQueue,
its flavors and priority classes are the platform's; the stack only names them.
"""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from infra.config import QueueConfig
from infra.labels import Identity, metadata
from trainer.contract import QUEUE_LABEL, QUEUE_PRIORITY_CLASS_LABEL

KUEUE_API_VERSION = "kueue.x-k8s.io/v1beta2"
"""The Kueue API of its LocalQueue (Kueue 0.17, ``tools/versions.env`` ``KUEUE_VERSION``)."""
COMPONENT_QUEUE = "queue"


def queue_labels(queue: QueueConfig) -> dict[str, str]:
    """The worker StatefulSet's Kueue labels: none without a queue."""
    if not queue.enabled:
        return {}
    labels = {QUEUE_LABEL: queue.name}
    if queue.priority_class:
        labels[QUEUE_PRIORITY_CLASS_LABEL] = queue.priority_class
    return labels


def local_queue(
    ident: Identity, queue: QueueConfig, opts: pulumi.ResourceOptions
) -> k8s.apiextensions.CustomResource | None:
    """LocalQueue ``queueName`` in the training namespace, pointing at ``queueClusterQueue``;
    ``None`` (nothing registered) when the LocalQueue is the platform's or there is no queue."""
    if not queue.creates_local_queue:
        return None
    return k8s.apiextensions.CustomResource(
        "local-queue",
        api_version=KUEUE_API_VERSION,
        kind="LocalQueue",
        metadata=metadata(ident, queue.name, COMPONENT_QUEUE),
        spec={"clusterQueue": queue.cluster_queue},
        opts=opts,
    )
