"""HorizontalPodAutoscaler (``autoscaling/v2``) on the worker StatefulSet.

Every scale event changes the world size, which restarts the collective from the last
checkpoint (the trainer learns the live replica count from the API), so scale-down is slow
(stabilization window from config) and both directions move one worker per minute.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as kubernetes

from infra.component import Component
from infra.config import StackConfig
from infra.labels import kwargs, metadata

COMPONENT_TYPE = "tfd:infra:Autoscaler"
SCALE_UP_WINDOW_SECONDS = 60
STEP_PERIOD_SECONDS = 60


def hpa_manifest(cfg: StackConfig) -> dict:
    """The HPA: CPU utilization target on the StatefulSet, min/max from config."""
    a = cfg.autoscaling
    one_pod_per_minute = [{"type": "Pods", "value": 1, "periodSeconds": STEP_PERIOD_SECONDS}]
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
                "scaleDown": {
                    "stabilizationWindowSeconds": a.scale_down_window_seconds,
                    "policies": one_pod_per_minute,
                },
                "scaleUp": {
                    "stabilizationWindowSeconds": SCALE_UP_WINDOW_SECONDS,
                    "policies": one_pod_per_minute,
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
