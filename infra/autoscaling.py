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
import pulumi_kubernetes as k8s

from infra.component import Component
from infra.config import AutoscalingConfig, StackConfig
from infra.labels import Identity, metadata

COMPONENT_TYPE = "tfd:infra:Autoscaler"


def hpa_spec(
    a: AutoscalingConfig, statefulset_name: str
) -> k8s.autoscaling.v2.HorizontalPodAutoscalerSpecArgs:
    """The HPA: CPU target derived from request and limit, paced scale-up, no scale-down."""
    return k8s.autoscaling.v2.HorizontalPodAutoscalerSpecArgs(
        scale_target_ref=k8s.autoscaling.v2.CrossVersionObjectReferenceArgs(
            api_version="apps/v1", kind="StatefulSet", name=statefulset_name
        ),
        min_replicas=a.min_replicas,
        max_replicas=a.max_replicas,
        metrics=[
            k8s.autoscaling.v2.MetricSpecArgs(
                type="Resource",
                resource=k8s.autoscaling.v2.ResourceMetricSourceArgs(
                    name="cpu",
                    target=k8s.autoscaling.v2.MetricTargetArgs(
                        type="Utilization", average_utilization=a.cpu_utilization
                    ),
                ),
            )
        ],
        behavior=k8s.autoscaling.v2.HorizontalPodAutoscalerBehaviorArgs(
            scale_down=k8s.autoscaling.v2.HPAScalingRulesArgs(select_policy="Disabled"),
            scale_up=k8s.autoscaling.v2.HPAScalingRulesArgs(
                stabilization_window_seconds=a.scale_up_window_seconds,
                select_policy="Min",
                policies=[
                    k8s.autoscaling.v2.HPAScalingPolicyArgs(
                        type="Pods", value=1, period_seconds=a.scale_up_window_seconds
                    )
                ],
            ),
        ),
    )


@dataclass(frozen=True)
class AutoscalerArgs:
    """Inputs of :class:`Autoscaler`.

    Attributes:
        identity: labels and namespace of the HPA.
        autoscaling: the stack's ``autoscaling*`` settings.
        statefulset_name: the StatefulSet it scales (the HPA has its name too).
        statefulset: that StatefulSet's resource (the HPA is created after it).
    """

    identity: Identity
    autoscaling: AutoscalingConfig
    statefulset_name: str
    statefulset: pulumi.Resource

    @classmethod
    def from_config(cls, cfg: StackConfig, statefulset: pulumi.Resource) -> AutoscalerArgs:
        return cls(
            identity=Identity.of(cfg),
            autoscaling=cfg.autoscaling,
            statefulset_name=cfg.statefulset_name,
            statefulset=statefulset,
        )


class Autoscaler(Component):
    """The HPA, created after (and depending on) the StatefulSet."""

    def __init__(
        self, name: str, args: AutoscalerArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(COMPONENT_TYPE, name, opts)
        hpa = k8s.autoscaling.v2.HorizontalPodAutoscaler(
            name,
            metadata=metadata(args.identity, args.statefulset_name, "autoscaler"),
            spec=hpa_spec(args.autoscaling, args.statefulset_name),
            opts=self.child_opts(depends_on=[args.statefulset]),
        )
        self.register_outputs({"hpa": hpa.metadata.apply(lambda m: m.name)})
