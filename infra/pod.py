"""The worker pod template: the trainer container, its environment, volumes and security.

Every worker runs one ``trainer`` container as the image's non-root user on a read-only root
filesystem (``/tmp`` and ``HOME`` on an ``emptyDir``), with only ``args`` (the image owns the
entrypoint), the pod environment contract of ``trainer/contract/env.py``, and a short-lived
projected API token instead of an automounted one (:mod:`infra.namespace` grants its rights).
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from infra.config import StackConfig, TrainingConfig, WorkerConfig
from infra.image import IMAGE_GID, IMAGE_UID
from infra.labels import COMPONENT_WORKER, Identity, standard_labels
from trainer import contract

CONTAINER_NAME = "trainer"
RUN_AS_USER = IMAGE_UID
"""UID the pods run as: the image's numeric ``USER``, >= 10000 so it never maps to a host user."""
RUN_AS_GROUP = IMAGE_GID
TMP_DIR = "/tmp"
TMP_SIZE_LIMIT = "1Gi"
CHECKPOINT_MOUNT = "/checkpoints"
API_TOKEN_DIR = posixpath.dirname(contract.DEFAULT_API_TOKEN_PATH)
API_TOKEN_EXPIRATION_SECONDS = 3600
"""Lifetime of the projected token; the kubelet rotates it at 80 %, the trainer rereads it."""
ROOT_CA_CONFIGMAP = "kube-root-ca.crt"
"""ConfigMap the control plane publishes in every namespace with the API server's CA."""
REVISION_LABEL = "controller-revision-hash"
"""Label the StatefulSet controller puts on each pod: the template revision it was made from."""
IMAGE_ID_ANNOTATION = "tf-distributed.io/image-id"
"""Pod-template annotation with the built image's ID/digest: a rebuilt image under the same tag
(minikube) still changes the template and rolls the workers."""

if posixpath.dirname(contract.DEFAULT_API_CA_PATH) != API_TOKEN_DIR:  # pragma: no cover
    raise RuntimeError("contract: the API token and CA must live in the same directory")


def checkpoint_dir(cfg: StackConfig) -> str:
    """``TFD_CHECKPOINT_DIR``: ``<root>/<project>/<stack>/<runId>``, the root being the object
    store URI or the shared claim's mount. Unique per project, stack and run by construction:
    two stacks (or two projects) on one bucket or claim never share a run directory."""
    root = cfg.storage.uri.rstrip("/") if cfg.storage.uri else CHECKPOINT_MOUNT
    return f"{root}/{cfg.project}/{cfg.stack}/{cfg.training.run_id}"


def container_resources(w: WorkerConfig) -> dict[str, dict[str, str | int]]:
    """The trainer container's ``resources``: one worker's requests and limits (GPUs as a limit
    only, which Kubernetes copies to the request). The namespace quota multiplies these."""
    limits: dict[str, str | int] = {"cpu": w.cpu_limit, "memory": w.memory_limit}
    if w.gpus > 0:
        limits[w.gpu_resource] = w.gpus
    return {"requests": {"cpu": w.cpu_request, "memory": w.memory_request}, "limits": limits}


def trainer_flags(t: TrainingConfig) -> contract.TrainerFlags:
    """The trainer's flags the stack sets: its ``training`` settings and ``trainerFlags``
    (already validated, and never a flag of the former); the rest keep the trainer's defaults.
    """
    return contract.TrainerFlags(**dict(t.extra_flags), **_stack_flags(t))


def _stack_flags(t: TrainingConfig) -> dict[str, Any]:
    """The flags of the stack's keys that set one (``infra.config.key.Key.flag``)."""
    return dict(t.stack_flags)


def trainer_args(t: TrainingConfig) -> list[str]:
    """The container ``args`` (flags of ``python -m trainer``); the image owns the entrypoint.

    Every flag the stack sets is written, also at the trainer's default: the pod spec states
    the run's settings whatever the image's defaults are.
    """
    return trainer_flags(t).to_argv(always=_stack_flags(t))


@dataclass(frozen=True)
class PodArgs:
    """What the worker pod template is made of.

    Attributes:
        identity: labels of the pods and the namespace.
        statefulset_name, service_name, service_account_name: the workers' objects.
        workers: the pods' resources, GPUs, ports and grace period.
        training: the trainer's flags and the run id.
        checkpoint_dir: ``TFD_CHECKPOINT_DIR`` (:func:`checkpoint_dir`).
        claim_name: the shared checkpoint claim mounted at :data:`CHECKPOINT_MOUNT`; ``None``
            with an object-store URI.
        cluster_domain: the cluster's DNS domain (peer addresses).
        replicas_source: ``TFD_REPLICAS_SOURCE`` (``api`` with an autoscaler, else ``env``).
        project, stack: the run manifest's identity fields.
        image: container image reference (a digest reference on cloud stacks).
        pull_policy: ``imagePullPolicy`` chosen by the image component.
        image_id: value of the :data:`IMAGE_ID_ANNOTATION` pod-template annotation, if any.
    """

    identity: Identity
    statefulset_name: str
    service_name: str
    service_account_name: str
    workers: WorkerConfig
    training: TrainingConfig
    checkpoint_dir: str
    claim_name: str | None
    cluster_domain: str
    replicas_source: str
    project: str
    stack: str
    image: pulumi.Input[str]
    pull_policy: str
    image_id: pulumi.Input[str] | None = None

    @classmethod
    def from_config(
        cls,
        cfg: StackConfig,
        image: pulumi.Input[str],
        pull_policy: str,
        image_id: pulumi.Input[str] | None = None,
    ) -> PodArgs:
        return cls(
            identity=Identity.of(cfg),
            statefulset_name=cfg.statefulset_name,
            service_name=cfg.service_name,
            service_account_name=cfg.service_account_name,
            workers=cfg.workers,
            training=cfg.training,
            checkpoint_dir=checkpoint_dir(cfg),
            claim_name=None if cfg.storage.uri else cfg.checkpoint_claim_name,
            cluster_domain=cfg.cluster.domain,
            replicas_source=cfg.replicas_source,
            project=cfg.project,
            stack=cfg.stack,
            image=image,
            pull_policy=pull_policy,
            image_id=image_id,
        )


def _value(name: str, value: pulumi.Input[str]) -> k8s.core.v1.EnvVarArgs:
    return k8s.core.v1.EnvVarArgs(name=name, value=value)


def _field(name: str, path: str) -> k8s.core.v1.EnvVarArgs:
    """An environment variable from the downward API (a field of the pod)."""
    return k8s.core.v1.EnvVarArgs(
        name=name,
        value_from=k8s.core.v1.EnvVarSourceArgs(
            field_ref=k8s.core.v1.ObjectFieldSelectorArgs(api_version="v1", field_path=path)
        ),
    )


def pod_env(p: PodArgs) -> list[k8s.core.v1.EnvVarArgs]:
    """The pod environment contract (``trainer/contract/env.py``), plus ``HOME`` on the tmp volume.

    The container's image reference is ``TFD_IMAGE`` (the run manifest records it).
    ``TFD_WORKER_HOSTS`` is never set: it is for local runs only.
    """
    env = [
        _field(contract.ENV_POD_NAME, "metadata.name"),
        _field(contract.ENV_NAMESPACE, "metadata.namespace"),
        _value(contract.ENV_STATEFULSET, p.statefulset_name),
        _value(contract.ENV_SERVICE, p.service_name),
        _value(contract.ENV_REPLICAS, str(p.workers.replicas)),
        _value(contract.ENV_REPLICAS_SOURCE, p.replicas_source),
        _value(contract.ENV_GRPC_PORT, str(p.workers.grpc_port)),
        _value(contract.ENV_CLUSTER_DOMAIN, p.cluster_domain),
        _value(contract.ENV_CHECKPOINT_DIR, p.checkpoint_dir),
        _value(contract.ENV_METRICS_PORT, str(p.workers.metrics_port)),
        _value(contract.ENV_RUN_ID, p.training.run_id),
        # The run manifest's identity fields (trainer/manifest.py).
        _value(contract.ENV_PROJECT, p.project),
        _value(contract.ENV_STACK, p.stack),
        _value(contract.ENV_APP, p.identity.app_name),
        _field(contract.ENV_POD_REVISION, f"metadata.labels['{REVISION_LABEL}']"),
        # The trainer calls the API for its own StatefulSet (contract.API_CALLS).
        _value(contract.ENV_API_TOKEN_PATH, contract.DEFAULT_API_TOKEN_PATH),
        _value(contract.ENV_API_CA_PATH, contract.DEFAULT_API_CA_PATH),
        _value(contract.ENV_API_URL, contract.DEFAULT_API_URL),
        # Read-only root filesystem: libraries that write under $HOME get the tmp volume.
        _value("HOME", TMP_DIR),
    ]
    if p.image is not None:
        env.append(_value(contract.ENV_IMAGE, p.image))
    if p.workers.gpus > 0:
        # What the limit gives: the trainer stops when TensorFlow sees fewer (a node's driver).
        env.append(_value(contract.ENV_GPUS, str(p.workers.gpus)))
    return env


def _probe(path: str, period: int, failures: int) -> k8s.core.v1.ProbeArgs:
    return k8s.core.v1.ProbeArgs(
        http_get=k8s.core.v1.HTTPGetActionArgs(
            path=path, port=contract.METRICS_PORT_NAME, scheme="HTTP"
        ),
        period_seconds=period,
        timeout_seconds=5,
        failure_threshold=failures,
    )


def container_security_context() -> k8s.core.v1.SecurityContextArgs:
    return k8s.core.v1.SecurityContextArgs(
        run_as_non_root=True,
        run_as_user=RUN_AS_USER,
        run_as_group=RUN_AS_GROUP,
        allow_privilege_escalation=False,
        privileged=False,
        read_only_root_filesystem=True,
        capabilities=k8s.core.v1.CapabilitiesArgs(drop=["ALL"]),
        seccomp_profile=k8s.core.v1.SeccompProfileArgs(type="RuntimeDefault"),
    )


def pod_security_context() -> k8s.core.v1.PodSecurityContextArgs:
    return k8s.core.v1.PodSecurityContextArgs(
        run_as_non_root=True,
        run_as_user=RUN_AS_USER,
        run_as_group=RUN_AS_GROUP,
        fs_group=RUN_AS_GROUP,
        fs_group_change_policy="OnRootMismatch",
        seccomp_profile=k8s.core.v1.SeccompProfileArgs(type="RuntimeDefault"),
    )


def _api_token_volume() -> k8s.core.v1.VolumeArgs:
    """The short-lived projected token and the API server's CA, in one directory."""
    return k8s.core.v1.VolumeArgs(
        name="api-token",
        projected=k8s.core.v1.ProjectedVolumeSourceArgs(
            default_mode=0o440,
            sources=[
                k8s.core.v1.VolumeProjectionArgs(
                    service_account_token=k8s.core.v1.ServiceAccountTokenProjectionArgs(
                        path=posixpath.basename(contract.DEFAULT_API_TOKEN_PATH),
                        expiration_seconds=API_TOKEN_EXPIRATION_SECONDS,
                    )
                ),
                k8s.core.v1.VolumeProjectionArgs(
                    config_map=k8s.core.v1.ConfigMapProjectionArgs(
                        name=ROOT_CA_CONFIGMAP,
                        items=[
                            k8s.core.v1.KeyToPathArgs(
                                key="ca.crt",
                                path=posixpath.basename(contract.DEFAULT_API_CA_PATH),
                            )
                        ],
                    )
                ),
            ],
        ),
    )


def volumes(
    p: PodArgs,
) -> tuple[list[k8s.core.v1.VolumeMountArgs], list[k8s.core.v1.VolumeArgs]]:
    """The trainer container's mounts and the pod's volumes, in the same order."""
    mounts = [k8s.core.v1.VolumeMountArgs(name="tmp", mount_path=TMP_DIR)]
    vols = [
        k8s.core.v1.VolumeArgs(
            name="tmp", empty_dir=k8s.core.v1.EmptyDirVolumeSourceArgs(size_limit=TMP_SIZE_LIMIT)
        )
    ]
    if p.claim_name is not None:
        mounts.append(k8s.core.v1.VolumeMountArgs(name="checkpoints", mount_path=CHECKPOINT_MOUNT))
        vols.append(
            k8s.core.v1.VolumeArgs(
                name="checkpoints",
                persistent_volume_claim=k8s.core.v1.PersistentVolumeClaimVolumeSourceArgs(
                    claim_name=p.claim_name
                ),
            )
        )
    if p.workers.gpus > 0:
        # NCCL exchanges buffers through /dev/shm; the runtime's default is 64 MiB. Sized per
        # GPU; the config check keeps it within half of memoryLimit, which it counts against.
        mounts.append(k8s.core.v1.VolumeMountArgs(name="dshm", mount_path="/dev/shm"))
        vols.append(
            k8s.core.v1.VolumeArgs(
                name="dshm",
                empty_dir=k8s.core.v1.EmptyDirVolumeSourceArgs(
                    medium="Memory", size_limit=p.workers.shm_size
                ),
            )
        )
    # The trainer always calls the API (contract.API_CALLS): a short-lived projected token.
    mounts.append(
        k8s.core.v1.VolumeMountArgs(name="api-token", mount_path=API_TOKEN_DIR, read_only=True)
    )
    vols.append(_api_token_volume())
    return mounts, vols


def trainer_container(
    p: PodArgs, mounts: list[k8s.core.v1.VolumeMountArgs]
) -> k8s.core.v1.ContainerArgs:
    """The one container of a worker pod."""
    w = p.workers
    resources = container_resources(w)
    return k8s.core.v1.ContainerArgs(
        name=CONTAINER_NAME,
        image=p.image,
        image_pull_policy=p.pull_policy,
        args=trainer_args(p.training),
        env=pod_env(p),
        ports=[
            k8s.core.v1.ContainerPortArgs(
                name=contract.GRPC_PORT_NAME, container_port=w.grpc_port, protocol="TCP"
            ),
            k8s.core.v1.ContainerPortArgs(
                name=contract.METRICS_PORT_NAME, container_port=w.metrics_port, protocol="TCP"
            ),
        ],
        resources=k8s.core.v1.ResourceRequirementsArgs(
            requests=resources["requests"], limits=resources["limits"]
        ),
        # TensorFlow's import and the first collective take a while: the startup probe holds
        # the liveness probe off for up to 5 minutes.
        startup_probe=_probe(contract.LIVENESS_PATH, 5, 60),
        liveness_probe=_probe(contract.LIVENESS_PATH, 10, 3),
        readiness_probe=_probe(contract.READINESS_PATH, 5, 3),
        security_context=container_security_context(),
        volume_mounts=mounts,
    )


def gpu_node_selector(w: WorkerConfig) -> dict[str, str]:
    """The ``key=value`` entries of ``gpuNodeSelector`` (GPU workers only)."""
    if w.gpus == 0:
        return {}
    return {k: v for k, v in w.gpu_node_selector if v is not None}


def gpu_node_affinity(w: WorkerConfig) -> k8s.core.v1.AffinityArgs | None:
    """The bare ``key`` entries of ``gpuNodeSelector`` as required node affinity, operator
    ``Exists``: a cloud's accelerator label names the GPU model (nvidia-l4, ...), so only its
    presence marks every GPU node."""
    keys = [k for k, v in w.gpu_node_selector if v is None] if w.gpus else []
    if not keys:
        return None
    term = k8s.core.v1.NodeSelectorTermArgs(
        match_expressions=[
            k8s.core.v1.NodeSelectorRequirementArgs(key=k, operator="Exists") for k in keys
        ]
    )
    return k8s.core.v1.AffinityArgs(
        node_affinity=k8s.core.v1.NodeAffinityArgs(
            required_during_scheduling_ignored_during_execution=k8s.core.v1.NodeSelectorArgs(
                node_selector_terms=[term]
            )
        )
    )


def pod_template(p: PodArgs) -> k8s.core.v1.PodTemplateSpecArgs:
    """The StatefulSet's pod template."""
    w = p.workers
    mounts, vols = volumes(p)
    gpu = w.gpus > 0
    return k8s.core.v1.PodTemplateSpecArgs(
        metadata=k8s.meta.v1.ObjectMetaArgs(
            labels=standard_labels(p.identity, COMPONENT_WORKER),
            annotations={IMAGE_ID_ANNOTATION: p.image_id} if p.image_id is not None else None,
        ),
        spec=k8s.core.v1.PodSpecArgs(
            service_account_name=p.service_account_name,
            automount_service_account_token=False,
            enable_service_links=False,
            termination_grace_period_seconds=w.termination_grace_seconds,
            security_context=pod_security_context(),
            containers=[trainer_container(p, mounts)],
            volumes=vols,
            node_selector=gpu_node_selector(w) or None,
            affinity=gpu_node_affinity(w),
            # Toleration.manifest()'s keys are one word each: the same in both spellings.
            tolerations=[k8s.core.v1.TolerationArgs(**t.manifest()) for t in w.gpu_tolerations]
            if gpu and w.gpu_tolerations
            else None,
        ),
    )
