"""``build_stack``: every resource of one stack, from a validated :class:`StackConfig`.

All pure validation (config, image arguments) happens before the first resource is registered,
so a bad value never leaves a half-registered program behind.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import pulumi

from infra.admission import WorkerScaleGuard, WorkerScaleGuardArgs
from infra.autoscaling import Autoscaler, AutoscalerArgs
from infra.cluster import make_provider
from infra.config import StackConfig
from infra.image import PrebuiltImage, TrainerImage, image_args, prebuilt_image
from infra.labels import Identity, selector_labels, standard_labels
from infra.namespace import TrainingNamespace, TrainingNamespaceArgs
from infra.network import NetworkPolicies, NetworkPoliciesArgs
from infra.pod import CONTAINER_NAME
from infra.provenance import source_commit
from infra.queue import local_queue
from infra.workers import Workers, WorkersArgs, max_replicas
from trainer import contract

if TYPE_CHECKING:
    from infra.monitoring import Monitoring

MONITORING_OUTPUTS = {
    "monitoringNamespace": "namespace",
    "grafanaService": "grafana_service",
    "prometheusService": "prometheus_service",
    "grafanaPortForward": "grafana_port_forward",
    "prometheusPortForward": "prometheus_port_forward",
    "grafanaAdminSecret": "grafana_admin_secret",
}
"""Stack output name -> :class:`infra.monitoring.Monitoring` attribute, exported only with
monitoring enabled."""


@dataclass(frozen=True)
class StackOutputs:
    """What a user needs after ``pulumi up`` (exported by ``__main__.py``).

    Attributes:
        namespace: the training namespace.
        statefulset: the worker StatefulSet's name.
        service: the headless Service's name.
        worker_addresses: ``host:port`` of every worker at the configured replica count.
        logs_command: a ``kubectl`` command that follows every worker's log.
        image: the container image reference the workers run (built, or ``imageReference``).
        image_digest: its ``sha256:`` digest (``""`` for a prebuilt reference by tag only).
        source_commit: the program's git commit (``""`` outside a checkout).
        config_hash: the SHA-256 of the effective configuration (``infra.provenance``).
        monitoring: the monitoring component (monitoring enabled), whose outputs are exported
            under the names of :data:`MONITORING_OUTPUTS`; ``None`` exports none of them.
    """

    namespace: pulumi.Output[str]
    statefulset: pulumi.Output[str]
    service: pulumi.Output[str]
    worker_addresses: list[str]
    logs_command: str
    image: pulumi.Input[str]
    image_digest: pulumi.Input[str] = ""
    source_commit: str = ""
    config_hash: str = ""
    monitoring: Monitoring | None = None

    def export(self) -> None:
        pulumi.export("namespace", self.namespace)
        pulumi.export("statefulset", self.statefulset)
        pulumi.export("service", self.service)
        pulumi.export("workerAddresses", self.worker_addresses)
        pulumi.export("logsCommand", self.logs_command)
        pulumi.export("image", self.image)
        pulumi.export("imageDigest", self.image_digest)
        pulumi.export("sourceCommit", self.source_commit)
        pulumi.export("configHash", self.config_hash)
        if self.monitoring is not None:
            for output, attribute in MONITORING_OUTPUTS.items():
                pulumi.export(output, getattr(self.monitoring, attribute))


def logs_command(cfg: StackConfig) -> str:
    """``kubectl logs -f`` over every worker, each line prefixed with its pod, on the stack's
    own cluster: its kube context, and its kubeconfig when the stack holds one (read back with
    ``pulumi config get``, never written into the output), not the shell's current context."""
    selector = ",".join(f"{k}={v}" for k, v in selector_labels(Identity.of(cfg)).items())
    context = f"--context {cfg.cluster.context} " if cfg.cluster.context else ""
    if cfg.cluster.kubeconfig is not None:
        context = f"--kubeconfig <(pulumi config get kubeconfig) {context}"
    return (
        f"kubectl {context}-n {cfg.namespace} logs -f -l {selector} -c {CONTAINER_NAME} "
        f"--prefix --max-log-requests {max_replicas(cfg)}"
    )


def build_stack(cfg: StackConfig) -> StackOutputs:
    """Register every resource of the stack and return its outputs.

    Raises:
        ConfigError: the image settings are invalid (checked before any resource exists).
    """
    prebuilt = prebuilt_image(cfg.image, cluster_kind=cfg.cluster.kind)
    trainer_image_args = (
        None
        if prebuilt is not None
        else image_args(cfg.image, gpu=cfg.workers.gpus > 0, cluster_kind=cfg.cluster.kind)
    )

    identity = Identity.of(cfg)
    monitoring_args = None
    if cfg.monitoring.enabled:
        # Imported only when used: the monitoring stack is optional.
        from infra.alerts import AlertThresholds
        from infra.monitoring import MonitoringArgs

        monitoring_args = MonitoringArgs(
            namespace=cfg.monitoring.namespace,
            chart_version=cfg.monitoring.chart_version,
            grafana_admin_password=cfg.monitoring.grafana_admin_password,
            # A plain name: the component depends on the namespace through its options.
            training_namespace=cfg.namespace,
            worker_selector=selector_labels(identity),
            labels=standard_labels(identity, "monitoring"),
            install=cfg.monitoring.install,
            chart_repository=cfg.monitoring.chart_repository,
            values=cfg.monitoring.values,
            alert_thresholds=AlertThresholds(for_minutes=cfg.monitoring.alert_for_minutes),
            create_namespace=cfg.monitoring.creates_namespace,
        )

    commit = source_commit()
    provider = make_provider("kubernetes", cfg.cluster)
    on_cluster = pulumi.ResourceOptions(providers=[provider])

    image: PrebuiltImage | TrainerImage = (
        prebuilt if trainer_image_args is None else TrainerImage("trainer", trainer_image_args)
    )
    digest = pulumi.Output.from_input(image.content_id).apply(contract.image_digest)
    namespace = TrainingNamespace("training", TrainingNamespaceArgs.from_config(cfg), on_cluster)
    in_namespace = pulumi.ResourceOptions(providers=[provider], depends_on=[namespace])
    NetworkPolicies("network", NetworkPoliciesArgs.from_config(cfg), in_namespace)
    # Before any worker runs: the workers' scale calls are held at zero from their first call.
    guard = WorkerScaleGuard(
        "scale-guard",
        WorkerScaleGuardArgs.from_config(cfg, namespace.role_rules),
        on_cluster,
    )
    # Before the workers: Kueue judges their Workload against the LocalQueue once they exist.
    queue = local_queue(identity, cfg.queue, in_namespace)
    workers = Workers(
        "workers",
        WorkersArgs.from_config(
            cfg,
            image=image.image_ref,
            pull_policy=image.pull_policy,
            image_id=image.content_id,
            source_commit=commit,
            image_digest=digest,
        ),
        pulumi.ResourceOptions(
            providers=[provider],
            depends_on=[namespace, guard, *([queue] if queue is not None else [])],
        ),
    )
    if cfg.autoscaling.enabled:
        Autoscaler("autoscaler", AutoscalerArgs.from_config(cfg, workers.statefulset), in_namespace)
    monitoring = None
    if monitoring_args is not None:
        from infra.monitoring import Monitoring

        monitoring = Monitoring("monitoring", monitoring_args, in_namespace)

    return StackOutputs(
        namespace=namespace.namespace_name,
        statefulset=workers.statefulset_name,
        service=workers.service_name,
        worker_addresses=list(
            contract.worker_addresses(
                cfg.statefulset_name,
                cfg.workers.replicas,
                cfg.service_name,
                cfg.namespace,
                cfg.cluster.domain,
                cfg.workers.grpc_port,
            )
        ),
        logs_command=logs_command(cfg),
        image=image.image_ref,
        image_digest=digest,
        source_commit=commit,
        config_hash=cfg.config_hash,
        monitoring=monitoring,
    )
