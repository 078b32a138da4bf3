"""The training namespace's ResourceQuota: what every worker together may ask for, at most.

The workers' ServiceAccount may scale their StatefulSet (``contract.API_CALLS``), and an HPA
may too; a quota bounds what any replica count can take from a shared cluster, GPUs first.
Every figure is one worker's (:func:`infra.pod.container_resources`, the same dictionary
the StatefulSet's container gets) times the most workers the stack can have
(:func:`infra.workers.max_replicas`: ``autoscalingMaxReplicas`` with the HPA, else
``replicas``). There is no room for a surge: StatefulSet pods have fixed names
(``<statefulset>-<ordinal>``) and the controller creates a replacement only once its
predecessor is gone, and ``updateStrategy: OnDelete`` never runs old and new pods side by side,
so the pods never outnumber the replicas. A new ``runId`` deletes the old StatefulSet before it
creates the new one (``delete_before_replace``), and the new pods reuse the old pods' names.

Only a namespace the stack owns gets a quota (``namespaceMode: create``): a quota counts every
pod of its namespace, so in a namespace shared with others it would cap their pods with the
workers' figures. There the namespace owner's quota applies, and the ValidatingAdmissionPolicy
of :mod:`infra.admission` still keeps the workers' own scale calls at zero.
"""

from __future__ import annotations

from infra.config import StackConfig, scale_quantity
from infra.pod import container_resources
from infra.workers import max_replicas

COMPUTE = ("cpu", "memory")
"""Resources a quota bounds both as requests and as limits; any other (an extended resource
such as ``nvidia.com/gpu``) can only be bounded as ``requests.<name>``, which Kubernetes sets
equal to its limit."""


def quota_name(app_name: str) -> str:
    return f"{app_name}-workers"


def quota_hard(cfg: StackConfig) -> dict[str, str]:
    """``spec.hard``: ``pods`` and every worker resource times :func:`max_replicas`."""
    count = max_replicas(cfg)
    resources = container_resources(cfg.workers)
    hard = {"pods": str(count)}
    for part in ("requests", "limits"):
        for name, amount in resources[part].items():
            key = f"{part}.{name}" if name in COMPUTE else f"requests.{name}"
            hard[key] = scale_quantity(amount, count)
    return hard
