"""The flat configuration to the typed :class:`~infra.config.model.StackConfig`: the keys read
(:mod:`infra.config.reading`), the rules between them (:mod:`infra.config.checks`), then the
model, built only from values that broke no rule."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Collection, Mapping
from typing import Any

import pulumi

from infra.config.checks import cross_field_problems, image_config
from infra.config.clouds import CLOUD_KEYS, with_cloud_defaults
from infra.config.errors import ConfigError
from infra.config.keys import KEYS, SECRET_KEYS
from infra.config.model import (
    AutoscalingConfig,
    ClusterConfig,
    MonitoringConfig,
    QueueConfig,
    StackConfig,
    StorageConfig,
    TrainingConfig,
    WorkerConfig,
)
from infra.config.quantities import millis
from infra.config.reading import hide_secrets, read_keys
from infra.provenance import config_digest

MINIKUBE_CONTEXT = "minikube"
"""Kube context used for ``clusterKind: minikube`` when ``kubeContext`` is empty."""


def parse_config(
    raw: Mapping[str, Any],
    secret_keys: Collection[str] = (),
    secrets: Mapping[str, pulumi.Output[str]] | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    project: str | None = None,
    stack: str | None = None,
    building: bool = True,
) -> StackConfig:
    """Validate the flat configuration and build the typed :class:`StackConfig`.

    Args:
        raw: fully qualified keys (``tf-distributed:replicas``) to values as the Pulumi runtime
            gives them (strings; arrays as JSON text). Other namespaces are ignored, except
            ``pulumi:disable-default-providers``, which must include ``kubernetes`` (or ``*``).
        secret_keys: fully qualified keys whose values are secrets.
        secrets: the secret values as ``pulumi.Output`` (from ``Config.get_secret``), keyed by
            the short key; only read when the whole configuration is valid.
        environ: the process environment (default ``os.environ``); only ``DOCKER_HOST`` is
            read, for minikube stacks that build their image.
        project, stack: the Pulumi project and stack names (default: the running program's,
            ``pulumi.get_project()`` and ``pulumi.get_stack()``); each must be a path segment
            (:data:`trainer.contract.RUN_ID`), as it names the checkpoint directory.
        building: false for a reader of the stack that builds no image (``tfd status``): the
            image's rules (a Docker daemon for minikube, a registry to push to) are skipped.

    Raises:
        ConfigError: one or more values break a rule; nothing has been registered.
    """
    project = pulumi.get_project() if project is None else project
    stack = pulumi.get_stack() if stack is None else stack
    reading = read_keys(raw, secret_keys, secrets)
    reading = dataclasses.replace(reading, values=cloud_values(reading.values))
    problems = reading.problems + cross_field_problems(
        reading.values,
        secrets_set=reading.secrets_set,
        environ=os.environ if environ is None else environ,
        project=project,
        stack=stack,
        building=building,
    )
    if problems:
        raise ConfigError([hide_secrets(line, raw, secret_keys) for line in problems])
    cfg = build(reading.values, reading.secrets_set, project=project, stack=stack)
    shown = {
        k: (k in reading.secrets_set) if k in SECRET_KEYS else v for k, v in reading.values.items()
    }
    return dataclasses.replace(cfg, config_hash=config_digest(shown, SECRET_KEYS))


def cloud_values(v: Mapping[str, Any]) -> dict[str, Any]:
    """The values read, with the keys the stack's cloud (``clusterKind``) fills that are still
    at their declared defaults replaced by the cloud's (:mod:`infra.config.clouds`)."""

    def read(name: str, value: Any) -> Any:
        return KEYS[name].kind.read(value).value

    declared = {name: read(name, KEYS[name].default) for name in CLOUD_KEYS}
    return with_cloud_defaults(v.get("clusterKind"), v, declared, read)


def build(
    v: Mapping[str, Any], secrets_set: frozenset[str], *, project: str, stack: str
) -> StackConfig:
    """The typed configuration of values (by short key) that broke no rule; ``secrets_set``:
    the secret keys given a value."""
    context = v["kubeContext"] or None
    if v["clusterKind"] == "minikube" and context is None and "kubeconfig" not in secrets_set:
        context = MINIKUBE_CONTEXT
    cpu_request, cpu_limit = v["cpuRequest"], v["cpuLimit"]
    return StackConfig(
        app_name=v["appName"],
        namespace=v["namespace"],
        namespace_mode=v["namespaceMode"],
        cluster=ClusterConfig(
            kind=v["clusterKind"],
            context=context,
            kubeconfig=v["kubeconfig"],
            domain=v["clusterDomain"],
            api_server_cidrs=v["apiServerCidrs"],
            api_server_ports=v["apiServerPorts"],
            egress_https_cidrs=v["egressHttpsCidrs"],
            dns_egress_cidrs=v["dnsEgressCidrs"],
            metadata_egress=v["metadataEgress"],
        ),
        workers=WorkerConfig(
            replicas=v["replicas"],
            gpus=v["gpusPerWorker"],
            gpu_resource=v["gpuResourceName"],
            cpu_request=cpu_request.text,
            cpu_limit=cpu_limit.text,
            memory_request=v["memoryRequest"].text,
            memory_limit=v["memoryLimit"].text,
            gpu_node_selector=v["gpuNodeSelector"],
            gpu_tolerations=v["gpuTolerations"],
            termination_grace_seconds=v["terminationGracePeriodSeconds"],
            grpc_port=v["grpcPort"],
            metrics_port=v["metricsPort"],
        ),
        storage=StorageConfig(
            storage_class=v["checkpointStorageClass"],
            size=v["checkpointSize"].text,
            uri=v["checkpointUri"] or None,
            retention=v["checkpointRetention"],
        ),
        training=TrainingConfig(
            dataset=v["dataset"],
            epochs=v["epochs"],
            batch_size=v["batchSize"],
            steps_per_epoch=v["stepsPerEpoch"],
            checkpoint_every=v["checkpointEvery"],
            collective=v["collective"],
            collective_timeout_seconds=v["collectiveTimeoutSeconds"],
            heartbeat_timeout_seconds=v["heartbeatTimeoutSeconds"],
            run_id=v["runId"],
            on_done=v["onDone"],
            precision=v["precision"],
            extra_flags=v["trainerFlags"],
            stack_flags=tuple((k.flag, v[k.name]) for k in KEYS.values() if k.flag),
        ),
        autoscaling=AutoscalingConfig(
            enabled=v["autoscalingEnabled"],
            min_replicas=v["autoscalingMinReplicas"],
            max_replicas=v["autoscalingMaxReplicas"],
            cpu_limit_utilization=v["autoscalingCpuLimitUtilization"],
            scale_up_window_seconds=v["autoscalingScaleUpWindowSeconds"],
            cpu_request_millis=millis(cpu_request.value),
            cpu_limit_millis=millis(cpu_limit.value),
        ),
        monitoring=MonitoringConfig(
            enabled=v["monitoringEnabled"],
            namespace=v["monitoringNamespace"],
            chart_version=v["monitoringChartVersion"],
            install=v["monitoringInstall"],
            grafana_admin_password=v["grafanaAdminPassword"],
            chart_repository=v["monitoringChartRepository"],
            values=v["monitoringValuesFile"],
            alert_for_minutes=v["monitoringAlertForMinutes"],
            namespace_mode=v["monitoringNamespaceMode"],
        ),
        project=project,
        stack=stack,
        image=image_config(v),
        queue=QueueConfig(
            name=v["queueName"],
            cluster_queue=v["queueClusterQueue"],
            priority_class=v["queuePriorityClass"],
        ),
    )
