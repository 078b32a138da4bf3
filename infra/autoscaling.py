"""HorizontalPodAutoscaler (``autoscaling/v2``) on the worker StatefulSet, for synchronous training.

Every resize changes the world size: the workers agree on a step, checkpoint, and their
supervisors restart the trainer with the new size (no pod restart, no back-off). So:

* the target is given against the CPU *limit* (``autoscalingCpuLimitUtilization``) and converted
  to the request-relative ``averageUtilization`` Kubernetes uses; a request-relative target
  below ``limit / request`` would be exceeded by every healthy worker;
* scale-up is stabilised and paced: the usage must stay above the target for the whole window
  (``autoscalingScaleUpWindowSeconds``), then one worker is added per window;
* scale-down is disabled: a synchronous job's CPU use does not fall when it has too many
  workers, and every step down would redo up to a checkpoint interval. A finished run scales
  itself to zero (``onDone``); Kubernetes never autoscales a target at zero replicas.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as kubernetes

from infra.component import Component
from infra.config import StackConfig
from infra.labels import kwargs, metadata

COMPONENT_TYPE = "tfd:infra:Autoscaler"


def hpa_manifest(cfg: StackConfig) -> dict:
    """The HPA: CPU target derived from request and limit, paced scale-up, no scale-down."""
    a = cfg.autoscaling
    return {
        "metadata": metadata(cfg, cfg.statefulset_name, "autoscaler"),
        "spec": {
            "scaleTargetRef": {
                "apiVersion": "apps/v1",
                "kind": "StatefulSet",
                "name": cfg.statefulset_name,
            },
            "minReplicas": a.min_replicas,
            "maxReplicas": a.max_replicas,
            "metrics": [
                {
                    "type": "Resource",
                    "resource": {
                        "name": "cpu",
                        "target": {"type": "Utilization", "averageUtilization": a.cpu_utilization},
                    },
                }
            ],
            "behavior": {
                "scaleDown": {"selectPolicy": "Disabled"},
                "scaleUp": {
                    "stabilizationWindowSeconds": a.scale_up_window_seconds,
                    "selectPolicy": "Min",
                    "policies": [
                        {"type": "Pods", "value": 1, "periodSeconds": a.scale_up_window_seconds}
                    ],
                },
            },
        },
    }


@dataclass(frozen=True)
class AutoscalerArgs:
    """Inputs of :class:`Autoscaler`: the config and the StatefulSet it scales."""

    cfg: StackConfig
    statefulset: pulumi.Resource


class Autoscaler(Component):
    """The HPA, created after (and depending on) the StatefulSet."""

    def __init__(
        self, name: str, args: AutoscalerArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(COMPONENT_TYPE, name, opts)
        hpa = kubernetes.autoscaling.v2.HorizontalPodAutoscaler(
            name,
            **kwargs(hpa_manifest(args.cfg)),
            opts=self.child_opts(depends_on=[args.statefulset]),
        )
        self.register_outputs({"hpa": hpa.metadata.apply(lambda m: m.name)})
