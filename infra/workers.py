"""The workers: headless Service, shared checkpoint claim, StatefulSet and PodDisruptionBudget.

Why a StatefulSet behind a headless Service: each pod gets a stable name (``<sts>-<ordinal>``)
and DNS record, from which the trainer derives its task index and every peer's address
(``trainer/contract/cluster.py``). ``podManagementPolicy: Parallel`` starts all workers at
once: with ``OrderedReady`` worker 1 waits for worker 0 to be Ready while worker 0 waits in the
collective for worker 1. ``publishNotReadyAddresses`` lets peers resolve each other before they
are Ready.

The run's lifecycle (``docs/infra.md``, "Lifecycle"):

* Run identity: ``runId`` names the checkpoint directory (``<root>/<project>/<stack>/<runId>``,
  :func:`checkpoint_dir`) and is an annotation of the StatefulSet that Pulumi replaces on
  change (delete first): a new run starts with ``replicas`` workers from step 0, whatever the
  previous run scaled to.
* Rollouts: ``updateStrategy: OnDelete``. A ``RollingUpdate`` replaces one pod at a time from
  the highest ordinal, each replacement breaks the collective (N restarts, old and new images
  side by side), and ``maxUnavailable`` for StatefulSets is an alpha feature. Instead every
  worker compares its ``controller-revision-hash`` with the StatefulSet's ``updateRevision``;
  on a new template they agree on a step, checkpoint, and each deletes its own pod, so the
  controller (``Parallel``) recreates them all together, once.
* Completion: with ``onDone: scale-to-zero`` the chief scales the StatefulSet to 0 through the
  ``scale`` subresource. ``spec.replicas`` then belongs to that field manager; Pulumi keeps its
  inputs, so ``pulumi preview`` shows no diff, and the HPA leaves a target at 0 alone.
* The worker count: the StatefulSet resource sets ``spec.replicas`` when it is created and never
  again (``ignoreChanges``): the HPA, a resize and the trainer's scale to zero own it later. A
  ``StatefulSetPatch`` sets it to ``replicas`` (forced), and its Pulumi name carries a digest of
  the run's target (:func:`run_target`): when the target changes (more epochs: continue a
  finished run; a new worker count without an HPA) a new patch replaces the old one and the
  workers come back, also after the HPA has stopped acting on a target at zero. An unchanged
  target changes nothing, so a finished run stays at zero through ``pulumi up`` and ``pulumi
  refresh`` (the patch ignores its own ``spec.replicas`` read back by a refresh).
"""

from __future__ import annotations

import hashlib
import posixpath
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as kubernetes

from infra.component import Component
from infra.config import StackConfig
from infra.image import IMAGE_GID, IMAGE_UID
from infra.labels import COMPONENT_WORKER, kwargs, metadata, selector_labels, standard_labels
from trainer import contract

COMPONENT_TYPE = "tfd:infra:Workers"
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
RUN_ID_ANNOTATION = "tf-distributed.io/run-id"
"""StatefulSet annotation with ``runId``: its change replaces the StatefulSet (a new run)."""
REVISION_LABEL = "controller-revision-hash"
"""Label the StatefulSet controller puts on each pod: the template revision it was made from."""
CLOUD_TIMEOUTS = pulumi.CustomTimeouts(create="30m", update="30m")
"""StatefulSet awaits on cloud stacks: a GPU node pool scaling up from zero and a multi-GB
image pull each take minutes, beyond the provider's 10-minute default."""
RUN_TARGET_ANNOTATION = "tf-distributed.io/run-target"
"""Annotation of the worker count patch: what the run is asked to do (run id, epochs, steps per
epoch, and the worker count when no autoscaler owns it). A new value brings a finished run's
workers back; the same value leaves a finished run at zero (module docstring)."""
PATCH_FORCE_ANNOTATION = "pulumi.com/patchForce"
"""The provider's annotation for a forced server-side apply: the patch takes ``spec.replicas``
back from whoever set it last (the trainer's scale to zero, the HPA)."""
CLAIM_SERVER_FIELDS = ("spec.volumeName", "spec.volumeMode")
"""Fields of the checkpoint claim that the cluster fills in (the bound volume, the default
mode): ignored in diffs, so an imported claim is not replaced."""
SIZE_PATCH_IGNORED = ("spec.replicas", "metadata.annotations")
"""Fields of the size patch never diffed after its create (see :class:`Workers`): a new run
target is a new patch resource, so nothing of an existing patch is ever applied again."""
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


def max_replicas(cfg: StackConfig) -> int:
    """The most workers the StatefulSet can have: the autoscaler's maximum, else ``replicas``."""
    return cfg.autoscaling.max_replicas if cfg.autoscaling.enabled else cfg.workers.replicas


def container_resources(cfg: StackConfig) -> dict[str, dict[str, str | int]]:
    """The trainer container's ``resources``: one worker's requests and limits (GPUs as a limit
    only, which Kubernetes copies to the request). The namespace quota multiplies these."""
    w = cfg.workers
    limits: dict[str, str | int] = {"cpu": w.cpu_limit, "memory": w.memory_limit}
    if w.gpus > 0:
        limits[w.gpu_resource] = w.gpus
    return {"requests": {"cpu": w.cpu_request, "memory": w.memory_request}, "limits": limits}


def trainer_flags(cfg: StackConfig) -> contract.TrainerFlags:
    """The trainer's flags the stack sets (its ``training`` settings); the rest keep the
    trainer's defaults."""
    return contract.TrainerFlags(**_stack_flags(cfg))


def _stack_flags(cfg: StackConfig) -> dict[str, str | int]:
    t = cfg.training
    return {
        "dataset": t.dataset,
        "epochs": t.epochs,
        "batch_size": t.batch_size,
        "steps_per_epoch": t.steps_per_epoch,
        "checkpoint_every": t.checkpoint_every,
        "collective": t.collective,
        "collective_timeout": t.collective_timeout_seconds,
        "heartbeat_timeout": t.heartbeat_timeout_seconds,
        "on_done": t.on_done,
        "precision": t.precision,
    }


def trainer_args(cfg: StackConfig) -> list[str]:
    """The container ``args`` (flags of ``python -m trainer``); the image owns the entrypoint.

    Every flag the stack sets is written, also at the trainer's default: the pod spec states
    the run's settings whatever the image's defaults are.
    """
    return trainer_flags(cfg).to_argv(always=_stack_flags(cfg))


def pod_env(cfg: StackConfig, image: pulumi.Input[str] | None = None) -> list[dict]:
    """The pod environment contract (``trainer/contract/env.py``), plus ``HOME`` on the tmp volume.

    ``image``: the container's image reference, passed as ``TFD_IMAGE`` (the run manifest
    records it). ``TFD_WORKER_HOSTS`` is never set: it is for local runs only.
    """

    def field(path: str) -> dict:
        return {"valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": path}}}

    env = [
        {"name": contract.ENV_POD_NAME, **field("metadata.name")},
        {"name": contract.ENV_NAMESPACE, **field("metadata.namespace")},
        {"name": contract.ENV_STATEFULSET, "value": cfg.statefulset_name},
        {"name": contract.ENV_SERVICE, "value": cfg.service_name},
        {"name": contract.ENV_REPLICAS, "value": str(cfg.workers.replicas)},
        {"name": contract.ENV_REPLICAS_SOURCE, "value": cfg.replicas_source},
        {"name": contract.ENV_GRPC_PORT, "value": str(cfg.workers.grpc_port)},
        {"name": contract.ENV_CLUSTER_DOMAIN, "value": cfg.cluster.domain},
        {"name": contract.ENV_CHECKPOINT_DIR, "value": checkpoint_dir(cfg)},
        {"name": contract.ENV_METRICS_PORT, "value": str(cfg.workers.metrics_port)},
        {"name": contract.ENV_RUN_ID, "value": cfg.training.run_id},
        # The run manifest's identity fields (trainer/manifest.py).
        {"name": contract.ENV_PROJECT, "value": cfg.project},
        {"name": contract.ENV_STACK, "value": cfg.stack},
        {"name": contract.ENV_APP, "value": cfg.app_name},
        {"name": contract.ENV_POD_REVISION, **field(f"metadata.labels['{REVISION_LABEL}']")},
        # The trainer calls the API for its own StatefulSet (contract.API_CALLS).
        {"name": contract.ENV_API_TOKEN_PATH, "value": contract.DEFAULT_API_TOKEN_PATH},
        {"name": contract.ENV_API_CA_PATH, "value": contract.DEFAULT_API_CA_PATH},
        {"name": contract.ENV_API_URL, "value": contract.DEFAULT_API_URL},
        # Read-only root filesystem: libraries that write under $HOME get the tmp volume.
        {"name": "HOME", "value": TMP_DIR},
    ]
    if image is not None:
        env.append({"name": contract.ENV_IMAGE, "value": image})
    return env


def headless_service_manifest(cfg: StackConfig) -> dict:
    """Headless Service: one DNS record per worker, published before the worker is Ready."""
    return {
        "metadata": metadata(cfg, cfg.service_name, COMPONENT_WORKER),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": selector_labels(cfg),
            "ports": [
                {
                    "name": contract.GRPC_PORT_NAME,
                    "port": cfg.workers.grpc_port,
                    "targetPort": contract.GRPC_PORT_NAME,
                    "protocol": "TCP",
                },
                {
                    "name": contract.METRICS_PORT_NAME,
                    "port": cfg.workers.metrics_port,
                    "targetPort": contract.METRICS_PORT_NAME,
                    "protocol": "TCP",
                },
            ],
        },
    }


def checkpoint_claim_manifest(cfg: StackConfig) -> dict | None:
    """One ReadWriteMany claim shared by every worker; ``None`` with an object-store URI."""
    if cfg.storage.uri:
        return None
    return {
        "metadata": metadata(cfg, cfg.checkpoint_claim_name, "checkpoints"),
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "storageClassName": cfg.storage.storage_class,
            "resources": {"requests": {"storage": cfg.storage.size}},
        },
    }


def _probe(path: str, period: int, failures: int) -> dict:
    return {
        "httpGet": {"path": path, "port": contract.METRICS_PORT_NAME, "scheme": "HTTP"},
        "periodSeconds": period,
        "timeoutSeconds": 5,
        "failureThreshold": failures,
    }


def container_security_context() -> dict:
    return {
        "runAsNonRoot": True,
        "runAsUser": RUN_AS_USER,
        "runAsGroup": RUN_AS_GROUP,
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def statefulset_manifest(
    cfg: StackConfig,
    image: pulumi.Input[str],
    pull_policy: str,
    image_id: pulumi.Input[str] | None = None,
) -> dict:
    """The worker StatefulSet (``metadata`` + ``spec``).

    Args:
        image: container image reference (a digest reference on cloud stacks).
        pull_policy: ``imagePullPolicy`` chosen by the image component.
        image_id: value of the :data:`IMAGE_ID_ANNOTATION` pod-template annotation, if any.
    """
    w = cfg.workers
    mounts = [{"name": "tmp", "mountPath": TMP_DIR}]
    volumes: list[dict] = [{"name": "tmp", "emptyDir": {"sizeLimit": TMP_SIZE_LIMIT}}]
    if not cfg.storage.uri:
        mounts.append({"name": "checkpoints", "mountPath": CHECKPOINT_MOUNT})
        volumes.append(
            {
                "name": "checkpoints",
                "persistentVolumeClaim": {"claimName": cfg.checkpoint_claim_name},
            }
        )
    if w.gpus > 0:
        # NCCL exchanges buffers through /dev/shm; the runtime's default is 64 MiB.
        mounts.append({"name": "dshm", "mountPath": "/dev/shm"})
        volumes.append({"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "2Gi"}})
    # The trainer always calls the API (contract.API_CALLS): a short-lived projected token.
    mounts.append({"name": "api-token", "mountPath": API_TOKEN_DIR, "readOnly": True})
    volumes.append(
        {
            "name": "api-token",
            "projected": {
                "defaultMode": 0o440,
                "sources": [
                    {
                        "serviceAccountToken": {
                            "path": posixpath.basename(contract.DEFAULT_API_TOKEN_PATH),
                            "expirationSeconds": API_TOKEN_EXPIRATION_SECONDS,
                        }
                    },
                    {
                        "configMap": {
                            "name": ROOT_CA_CONFIGMAP,
                            "items": [
                                {
                                    "key": "ca.crt",
                                    "path": posixpath.basename(contract.DEFAULT_API_CA_PATH),
                                }
                            ],
                        }
                    },
                ],
            },
        }
    )

    container = {
        "name": CONTAINER_NAME,
        "image": image,
        "imagePullPolicy": pull_policy,
        "args": trainer_args(cfg),
        "env": pod_env(cfg, image),
        "ports": [
            {"name": contract.GRPC_PORT_NAME, "containerPort": w.grpc_port, "protocol": "TCP"},
            {
                "name": contract.METRICS_PORT_NAME,
                "containerPort": w.metrics_port,
                "protocol": "TCP",
            },
        ],
        "resources": container_resources(cfg),
        # TensorFlow's import and the first collective take a while: the startup probe holds
        # the liveness probe off for up to 5 minutes.
        "startupProbe": _probe(contract.LIVENESS_PATH, 5, 60),
        "livenessProbe": _probe(contract.LIVENESS_PATH, 10, 3),
        "readinessProbe": _probe(contract.READINESS_PATH, 5, 3),
        "securityContext": container_security_context(),
        "volumeMounts": mounts,
    }
    pod_spec: dict = {
        "serviceAccountName": cfg.service_account_name,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": w.termination_grace_seconds,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": RUN_AS_USER,
            "runAsGroup": RUN_AS_GROUP,
            "fsGroup": RUN_AS_GROUP,
            "fsGroupChangePolicy": "OnRootMismatch",
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [container],
        "volumes": volumes,
    }
    if w.gpus > 0:
        if w.gpu_node_selector:
            pod_spec["nodeSelector"] = dict(w.gpu_node_selector)
        if w.gpu_tolerations:
            pod_spec["tolerations"] = [t.manifest() for t in w.gpu_tolerations]

    template_meta: dict = {"labels": standard_labels(cfg, COMPONENT_WORKER)}
    if image_id is not None:
        template_meta["annotations"] = {IMAGE_ID_ANNOTATION: image_id}
    meta = metadata(cfg, cfg.statefulset_name, COMPONENT_WORKER)
    meta["annotations"] = {RUN_ID_ANNOTATION: cfg.training.run_id}
    return {
        "metadata": meta,
        "spec": {
            "serviceName": cfg.service_name,
            "replicas": w.replicas,
            "podManagementPolicy": "Parallel",
            # The trainer restarts all workers together on a new template (module docstring).
            "updateStrategy": {"type": "OnDelete"},
            "selector": {"matchLabels": selector_labels(cfg)},
            "template": {"metadata": template_meta, "spec": pod_spec},
        },
    }


def run_target(cfg: StackConfig) -> str:
    """What the run is asked to do: a change brings a finished run's workers back.

    The worker count is part of it only without an autoscaler (the HPA owns the count then).
    """
    t = cfg.training
    parts = [f"run={t.run_id}", f"epochs={t.epochs}", f"steps-per-epoch={t.steps_per_epoch}"]
    if not cfg.autoscaling.enabled:
        parts.append(f"replicas={cfg.workers.replicas}")
    return " ".join(parts)


def size_patch_manifest(cfg: StackConfig) -> dict:
    """The ``StatefulSetPatch`` that sets the worker count for the current run target."""
    return {
        "metadata": {
            "name": cfg.statefulset_name,
            "namespace": cfg.namespace,
            "annotations": {RUN_TARGET_ANNOTATION: run_target(cfg), PATCH_FORCE_ANNOTATION: "true"},
        },
        "spec": {"replicas": cfg.workers.replicas},
    }


def size_patch_name(name: str, cfg: StackConfig) -> str:
    """The patch's Pulumi name: a new target is a new resource (create, then the old one's
    delete gives up its fields), so the count is applied again exactly when the target changes."""
    digest = hashlib.sha256(run_target(cfg).encode()).hexdigest()[:10]
    return f"{name}-size-{digest}"


def pdb_manifest(cfg: StackConfig) -> dict:
    """``maxUnavailable: 0``: a voluntary eviction (drain) must not break a running collective.

    Drain a node by scaling the job down (or deleting it) first.
    """
    return {
        "metadata": metadata(cfg, cfg.statefulset_name, COMPONENT_WORKER),
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": selector_labels(cfg)}},
    }


@dataclass(frozen=True)
class WorkersArgs:
    """Inputs of :class:`Workers`.

    Attributes:
        cfg: the stack configuration.
        image: container image reference (output of the image component).
        pull_policy: ``imagePullPolicy``.
        image_id: changes whenever the image is rebuilt (pod-template annotation), optional.
    """

    cfg: StackConfig
    image: pulumi.Input[str]
    pull_policy: str
    image_id: pulumi.Input[str] | None = None


class Workers(Component):
    """Headless Service, checkpoint claim, StatefulSet and PodDisruptionBudget.

    Attributes:
        statefulset: the worker StatefulSet resource (the HPA's target).
        statefulset_name, service_name: their names, as outputs.
    """

    statefulset: kubernetes.apps.v1.StatefulSet
    statefulset_name: pulumi.Output[str]
    service_name: pulumi.Output[str]

    def __init__(
        self, name: str, args: WorkersArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(COMPONENT_TYPE, name, opts)
        cfg = args.cfg
        service = kubernetes.core.v1.Service(
            f"{name}-headless",
            **kwargs(headless_service_manifest(cfg)),
            opts=self.child_opts(),
        )
        claim_manifest = checkpoint_claim_manifest(cfg)
        sts_deps: list[pulumi.Resource] = [service]
        if claim_manifest is not None:
            claim = kubernetes.core.v1.PersistentVolumeClaim(
                f"{name}-checkpoints",
                **kwargs(claim_manifest),
                opts=self.child_opts(
                    # Checkpoints outlive `pulumi destroy` unless the stack says Delete (the
                    # namespace is retained too: its deletion would take the claim with it).
                    retain_on_delete=cfg.retains_checkpoint_claim,
                    # Set by the cluster when the claim binds, never by the program, and
                    # immutable: a claim imported after a Retain destroy (docs/infra.md) holds
                    # them, and their absence from the program must not replace it (a new,
                    # empty volume).
                    ignore_changes=list(CLAIM_SERVER_FIELDS),
                ),
            )
            sts_deps.append(claim)
        self.statefulset = kubernetes.apps.v1.StatefulSet(
            name,
            **kwargs(statefulset_manifest(cfg, args.image, args.pull_policy, args.image_id)),
            opts=self.child_opts(
                depends_on=sts_deps,
                # Set at creation only: the size patch below, the HPA, a resize and the
                # trainer's scale to zero own it afterwards (module docstring).
                ignore_changes=["spec.replicas"],
                # A new runId is a new run: a fresh StatefulSet at `replicas` workers. Delete
                # first: the old pods hold the GPUs (and the names) the new ones need.
                replace_on_changes=[f'metadata.annotations["{RUN_ID_ANNOTATION}"]'],
                delete_before_replace=True,
                custom_timeouts=CLOUD_TIMEOUTS if cfg.cluster.kind == "cloud" else None,
            ),
        )
        kubernetes.apps.v1.StatefulSetPatch(
            size_patch_name(name, cfg),
            **kwargs(size_patch_manifest(cfg)),
            opts=self.child_opts(
                depends_on=[self.statefulset],
                # spec.replicas: a refresh reads back the live count (0 once finished), not a
                # reason to apply. metadata.annotations: the provider records as the patch's
                # live state the StatefulSet its awaiter saw, which can be a cached copy from
                # before the apply (an annotation-only apply leaves the generation as it was),
                # so a diff against it would re-apply the patch on every preview. The
                # annotations change only with the run target, which renames the patch.
                ignore_changes=list(SIZE_PATCH_IGNORED),
            ),
        )
        kubernetes.policy.v1.PodDisruptionBudget(
            name,
            **kwargs(pdb_manifest(cfg)),
            opts=self.child_opts(),
        )
        self.statefulset_name = self.statefulset.metadata.apply(lambda m: m.name)
        self.service_name = service.metadata.apply(lambda m: m.name)
        self.register_outputs({"statefulset": self.statefulset_name, "service": self.service_name})
