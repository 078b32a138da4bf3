"""The typed stack configuration: frozen dataclasses, built by :func:`infra.config.parse_config`
from values that broke no rule. The defaults here are the keys' (:mod:`infra.config.keys`), for
code and tests that build a part directly."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pulumi

from infra.config.clouds import is_cloud
from infra.config.keys import default_of
from infra.config.kinds import Toleration

__all__ = [
    "AutoscalingConfig",
    "ClusterConfig",
    "ImageConfig",
    "MonitoringConfig",
    "StackConfig",
    "StorageConfig",
    "Toleration",
    "TrainingConfig",
    "WorkerConfig",
]


@dataclass(frozen=True)
class ClusterConfig:
    """Which cluster the explicit Kubernetes provider talks to.

    Attributes:
        kind: ``minikube``, ``cloud`` or a cloud by name (``gke``, ``eks``, ``aks``;
            :mod:`infra.config.clouds`).
        context: kube context name; ``None`` = the kubeconfig's current context.
        kubeconfig: secret kubeconfig contents; ``None`` = ``~/.kube/config`` / ``KUBECONFIG``.
        domain: cluster DNS domain (default ``cluster.local``).
        api_server_cidrs: CIDRs of the API server endpoints (egress allowed on every stack:
            the trainer reads and scales its StatefulSet and deletes its own pod).
        api_server_ports: TCP ports of those endpoints.
        dns_egress_cidrs: resolvers outside kube-dns (NodeLocal DNSCache, a metadata server)
            the pods may query on port 53.
        egress_https_cidrs: CIDRs the workers may reach on TCP 443 (dataset downloads, object
            stores); empty = no egress beyond peers, DNS and the API server.
        metadata_egress: ``(CIDR, port)`` of the metadata server giving object-store
            credentials (allowed only with a ``gs://`` checkpoint location).
    """

    kind: str
    context: str | None
    kubeconfig: pulumi.Output[str] | None
    domain: str
    api_server_cidrs: tuple[str, ...]
    api_server_ports: tuple[int, ...]
    egress_https_cidrs: tuple[str, ...] = ()
    dns_egress_cidrs: tuple[str, ...] = ()
    metadata_egress: tuple[tuple[str, int], ...] = ()

    @property
    def is_cloud(self) -> bool:
        """Not minikube: the image is pushed and pinned by digest (:func:`is_cloud`)."""
        return is_cloud(self.kind)


@dataclass(frozen=True)
class WorkerConfig:
    """The worker StatefulSet's pods.

    Attributes:
        replicas: workers (:data:`trainer.contract.rules.REPLICAS`); the HPA's starting point
            when autoscaling is on.
        gpus: GPUs per worker (0-16; 0 = CPU only, no GPU limit, selector or tolerations).
        gpu_resource: extended resource name of a GPU (default ``nvidia.com/gpu``).
        cpu_request, cpu_limit, memory_request, memory_limit: Kubernetes quantities.
        gpu_node_selector: node labels GPU workers must match, ``(key, value)`` each; a value
            of ``None``: the label is present, any value (node affinity ``Exists``).
        gpu_tolerations: taints GPU workers tolerate.
        termination_grace_seconds: SIGTERM-to-SIGKILL time for a preemption checkpoint
            (30-3600 s).
        grpc_port, metrics_port: container ports (1024-65535; non-root cannot bind below).
    """

    replicas: int
    gpus: int
    gpu_resource: str
    cpu_request: str
    cpu_limit: str
    memory_request: str
    memory_limit: str
    gpu_node_selector: tuple[tuple[str, str | None], ...]
    gpu_tolerations: tuple[Toleration, ...]
    termination_grace_seconds: int
    grpc_port: int
    metrics_port: int

    @property
    def shm_size(self) -> str:
        """The memory-backed ``/dev/shm`` of a GPU pod (:func:`shm_gib`), as a quantity."""
        return f"{shm_gib(self.gpus)}Gi"


SHM_GIB_PER_GPU = 1
"""``/dev/shm`` per GPU: NCCL stages its intra-node buffers there (the runtime gives 64 MiB)."""


def shm_gib(gpus: int) -> int:
    """The ``/dev/shm`` of a pod with ``gpus`` GPUs, in GiB. A memory-backed volume counts
    against the container's memory limit, so ``memoryLimit`` must hold it twice over (the
    config check), leaving the trainer at least as much again."""
    return SHM_GIB_PER_GPU * gpus


@dataclass(frozen=True)
class StorageConfig:
    """Shared checkpoint storage: one ReadWriteMany claim, or an object-store URI.

    Attributes:
        storage_class: StorageClass of the claim (must support ReadWriteMany).
        size: claim size, a Kubernetes quantity of bytes (e.g. ``10Gi``).
        uri: ``gs://`` or ``s3://`` checkpoint location; ``None`` = the shared claim.
        retention: ``Retain`` keeps the claim (and its checkpoints) and its namespace on
            ``pulumi destroy``; ``Delete`` lets ``pulumi destroy`` delete them (and the
            StorageClass's reclaim policy then decides the volume's fate).
    """

    storage_class: str
    size: str
    uri: str | None
    retention: str


@dataclass(frozen=True)
class TrainingConfig:
    """The stack's settings of the trainer's flags and of its run.

    The flags' meaning and rules are :class:`trainer.contract.flags.TrainerFlags`'s (the stack
    reads each key with the flag's rule; ``infra.pod.trainer_args`` builds the flags).

    Attributes:
        dataset: ``synthetic``, ``mnist`` or a path/URI of the data.
        epochs, batch_size, steps_per_epoch, checkpoint_every, collective: the flags.
        collective_timeout_seconds, heartbeat_timeout_seconds: the timeout flags, in whole
            seconds (``Pulumi.yaml`` declares integers).
        run_id: identity of the run (its checkpoint directory and ``DONE``); a new one is a
            new run from step 0.
        on_done: ``scale-to-zero`` or ``idle`` (``--on-done``;
            :data:`trainer.contract.rules.ON_DONE_POD_MODES`).
        precision: ``auto``, ``fp32``, ``bf16`` or ``fp16`` (``fp16`` needs GPUs).
        extra_flags: the trainer's other flags (``trainerFlags``) as ``(field, value)`` pairs,
            parsed by the trainer's own parser.
        stack_flags: the flags of the keys that set one (``Key.flag``) as ``(field, value)``
            pairs: what the pod's ``args`` always state.
    """

    dataset: str
    epochs: int
    batch_size: int
    steps_per_epoch: int
    checkpoint_every: int
    collective: str
    collective_timeout_seconds: int
    heartbeat_timeout_seconds: int
    run_id: str = default_of("runId")
    on_done: str = default_of("onDone")
    precision: str = default_of("precision")
    extra_flags: tuple[tuple[str, Any], ...] = ()
    stack_flags: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class QueueConfig:
    """The cluster's queue (Kueue, docs/queue.md) the workers wait in.

    Attributes:
        name: ``queueName``, the LocalQueue; ``""``: no queue.
        cluster_queue: ``queueClusterQueue``: the stack creates LocalQueue ``name`` pointing at
            it; ``""``: the LocalQueue is the platform's.
        priority_class: ``queuePriorityClass``, a WorkloadPriorityClass; ``""``: none.
    """

    name: str = ""
    cluster_queue: str = ""
    priority_class: str = ""

    @property
    def enabled(self) -> bool:
        return bool(self.name)

    @property
    def creates_local_queue(self) -> bool:
        return bool(self.name and self.cluster_queue)


@dataclass(frozen=True)
class AutoscalingConfig:
    """HorizontalPodAutoscaler (``autoscaling/v2``) on the worker StatefulSet.

    Attributes:
        enabled: create the HPA (the trainer then follows the live replica count).
        min_replicas, max_replicas: min <= max, both within
            :data:`trainer.contract.rules.REPLICAS`.
        cpu_limit_utilization: scale up above this average CPU use, percent of the CPU
            limit (1-100); :attr:`cpu_utilization` converts it to the HPA's measure.
        scale_up_window_seconds: scale-up stabilization window and policy period (60-1800 s).
        cpu_request_millis, cpu_limit_millis: the workers' CPU request and limit.
    """

    enabled: bool
    min_replicas: int
    max_replicas: int
    cpu_limit_utilization: int
    scale_up_window_seconds: int
    cpu_request_millis: int
    cpu_limit_millis: int

    @property
    def cpu_utilization(self) -> int:
        """The HPA's ``averageUtilization``: percent of the CPU *request*, as Kubernetes counts.

        A synchronous worker runs at its limit, i.e. ``limit / request`` x 100 % of its request
        (200 % for 500m/1): a target given against the request alone (say 80 %) is exceeded
        by every healthy worker and resizes the job within minutes of every start.
        """
        return math.ceil(
            self.cpu_limit_utilization * self.cpu_limit_millis / self.cpu_request_millis
        )


@dataclass(frozen=True)
class MonitoringConfig:
    """The monitoring stack (kube-prometheus-stack), only deployed when ``enabled``; ``install``
    says whether this stack installs it or uses the cluster's existing install."""

    enabled: bool
    namespace: str = default_of("monitoringNamespace")
    chart_version: str = ""
    install: bool = True
    grafana_admin_password: pulumi.Output[str] | None = None
    chart_repository: str = ""
    values: Mapping[str, Any] = field(default_factory=dict)
    """Extra chart values from ``monitoringValuesFile`` (empty without one)."""
    alert_for_minutes: int = 0
    namespace_mode: str = default_of("monitoringNamespaceMode")

    @property
    def creates_namespace(self) -> bool:
        """The installing stack creates (and owns) the monitoring namespace; a stack that does
        not install, or ``monitoringNamespaceMode: existing``, never creates it."""
        return self.install and self.namespace_mode == "create"


@dataclass(frozen=True)
class ImageConfig:
    """The trainer image: built by the stack (see ``infra/image.py``), or prebuilt.

    Attributes:
        reference: a prebuilt image to deploy instead of building one (``imageReference``);
            ``None`` builds the Dockerfile. The build settings below are then unused.
        code_directory: the user's code and small data (``codeDirectory``), relative to the
            project directory, copied into an image built on the trainer image, which the
            workers then run; ``None``: the trainer image alone.
    """

    reference: str | None = None
    repository: str = default_of("imageRepository")
    tag: str = default_of("imageTag")
    registry: str | None = None
    registry_username: str | None = None
    registry_password: pulumi.Output[str] | None = None
    docker_host: str | None = None
    docker_cert_path: str | None = None
    platform: str = default_of("imagePlatform")
    code_directory: str | None = None


@dataclass(frozen=True)
class StackConfig:
    """The whole validated configuration of one stack.

    Attributes:
        app_name: prefix of every Kubernetes object name (DNS label, <= 40 characters).
        namespace: namespace of the training objects (never a system namespace).
        namespace_mode: ``create`` (the stack creates and owns the namespace) or ``existing``
            (it deploys into a namespace it does not own, see
            :data:`infra.config.key.NAMESPACE_MODES`).
        project, stack: the Pulumi project and stack names: with ``runId`` they name the run's
            checkpoint directory (``infra.pod.checkpoint_dir``), so no two stacks share one.
        queue: the cluster's queue the workers wait in (``queueName``...), none by default.
    """

    app_name: str
    namespace: str
    cluster: ClusterConfig
    workers: WorkerConfig
    storage: StorageConfig
    training: TrainingConfig
    autoscaling: AutoscalingConfig
    monitoring: MonitoringConfig
    project: str
    stack: str
    image: ImageConfig = field(default_factory=ImageConfig)
    namespace_mode: str = default_of("namespaceMode")
    config_hash: str = ""
    """SHA-256 of the effective configuration (``infra.provenance.config_digest``)."""
    queue: QueueConfig = field(default_factory=QueueConfig)

    @property
    def owns_namespace(self) -> bool:
        """The stack creates the training namespace, labels it and deletes it on destroy."""
        return self.namespace_mode == "create"

    @property
    def statefulset_name(self) -> str:
        return f"{self.app_name}-worker"

    @property
    def service_name(self) -> str:
        return f"{self.app_name}-workers"

    @property
    def service_account_name(self) -> str:
        return f"{self.app_name}-worker"

    @property
    def checkpoint_claim_name(self) -> str:
        return f"{self.app_name}-checkpoints"

    @property
    def retains_checkpoint_claim(self) -> bool:
        """``pulumi destroy`` keeps the checkpoint claim (and the namespace that holds it).

        True with ``checkpointRetention: Retain`` and a claim (no ``checkpointUri``): deleting
        the namespace would delete the claim, so a namespace the stack owns is
        ``retain_on_delete`` as well (:attr:`retains_namespace`).
        """
        return self.storage.uri is None and self.storage.retention == "Retain"

    @property
    def retains_namespace(self) -> bool:
        """``pulumi destroy`` keeps the namespace the stack created, for the claim it holds."""
        return self.owns_namespace and self.retains_checkpoint_claim

    @property
    def replicas_source(self) -> str:
        """``api`` when an autoscaler may change the replicas under the pods, else ``env``."""
        return "api" if self.autoscaling.enabled else "env"
