"""The workers: headless Service, shared checkpoint claim, StatefulSet and PodDisruptionBudget.

Why a StatefulSet behind a headless Service: each pod gets a stable name (``<sts>-<ordinal>``)
and DNS record, from which the trainer derives its task index and every peer's address
(``trainer/contract/cluster.py``). ``podManagementPolicy: Parallel`` starts all workers at
once: with ``OrderedReady`` worker 1 waits for worker 0 to be Ready while worker 0 waits in the
collective for worker 1. ``publishNotReadyAddresses`` lets peers resolve each other before they
are Ready.

The run's lifecycle (``docs/infra.md``, "Lifecycle"):

* Run identity: ``runId`` names the checkpoint directory (``<root>/<project>/<stack>/<runId>``,
  :func:`infra.pod.checkpoint_dir`) and is an annotation of the StatefulSet that Pulumi replaces on
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
from collections.abc import Mapping
from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

from infra.component import Component
from infra.config import StackConfig, StorageConfig
from infra.labels import COMPONENT_WORKER, Identity, metadata, selector, selector_labels
from infra.pod import PodArgs, pod_template
from infra.queue import queue_labels
from trainer import contract

COMPONENT_TYPE = "tfd:infra:Workers"
CLOUD_TIMEOUTS = pulumi.CustomTimeouts(create="30m", update="30m")
"""StatefulSet awaits on cloud stacks: a GPU node pool scaling up from zero and a multi-GB
image pull each take minutes, beyond the provider's 10-minute default."""
PATCH_FORCE_ANNOTATION = "pulumi.com/patchForce"
"""The provider's annotation for a forced server-side apply: the patch takes ``spec.replicas``
back from whoever set it last (the trainer's scale to zero, the HPA)."""
CLAIM_SERVER_FIELDS = ("spec.volumeName", "spec.volumeMode")
"""Fields of the checkpoint claim that the cluster fills in (the bound volume, the default
mode): ignored in diffs, so an imported claim is not replaced."""
SIZE_PATCH_IGNORED = ("spec.replicas", "metadata.annotations")
"""Fields of the size patch never diffed after its create (see :class:`Workers`): a new run
target is a new patch resource, so nothing of an existing patch is ever applied again."""


def max_replicas(cfg: StackConfig) -> int:
    """The most workers the StatefulSet can have: the autoscaler's maximum, else ``replicas``."""
    return cfg.autoscaling.max_replicas if cfg.autoscaling.enabled else cfg.workers.replicas


@dataclass(frozen=True)
class WorkersArgs:
    """Inputs of :class:`Workers`.

    Attributes:
        pod: the pod template's inputs (names, worker settings, image); the Service, claim,
            StatefulSet and budget take their identity, names and ports from it too.
        storage: the checkpoint claim's class and size (used when ``pod.claim_name`` is set).
        retain_claim: ``pulumi destroy`` keeps the checkpoint claim.
        cloud: a cloud cluster (longer StatefulSet awaits, :data:`CLOUD_TIMEOUTS`).
        run_target: what the run is asked to do (:func:`run_target`).
        provenance: the StatefulSet's provenance annotations (``infra.provenance``): annotation
            name -> value (the image digest is an output of the image component).
        labels: the StatefulSet's labels besides the standard ones: the queue's
            (:func:`infra.queue.queue_labels`).
    """

    pod: PodArgs
    storage: StorageConfig
    retain_claim: bool
    cloud: bool
    run_target: str
    provenance: Mapping[str, pulumi.Input[str]] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_config(
        cls,
        cfg: StackConfig,
        image: pulumi.Input[str],
        pull_policy: str,
        image_id: pulumi.Input[str] | None = None,
        source_commit: str = "",
        image_digest: pulumi.Input[str] = "",
    ) -> WorkersArgs:
        """``image``: the container image reference (output of the image component);
        ``pull_policy``: its ``imagePullPolicy``; ``image_id``: changes whenever the image is
        rebuilt (pod-template annotation), optional; ``source_commit``: the program's commit
        (``infra.provenance.source_commit``); ``image_digest``: the image's ``sha256:`` digest
        (``contract.image_digest``)."""
        return cls(
            pod=PodArgs.from_config(cfg, image, pull_policy, image_id),
            storage=cfg.storage,
            retain_claim=cfg.retains_checkpoint_claim,
            cloud=cfg.cluster.is_cloud,
            run_target=run_target(cfg),
            provenance={
                contract.SOURCE_COMMIT_ANNOTATION: source_commit,
                contract.CONFIG_HASH_ANNOTATION: cfg.config_hash,
                contract.IMAGE_DIGEST_ANNOTATION: image_digest,
            },
            labels=queue_labels(cfg.queue),
        )


def service_spec(p: PodArgs) -> k8s.core.v1.ServiceSpecArgs:
    """Headless Service: one DNS record per worker, published before the worker is Ready."""

    def port(name: str, number: int) -> k8s.core.v1.ServicePortArgs:
        return k8s.core.v1.ServicePortArgs(name=name, port=number, target_port=name, protocol="TCP")

    return k8s.core.v1.ServiceSpecArgs(
        cluster_ip="None",
        publish_not_ready_addresses=True,
        selector=selector_labels(p.identity),
        ports=[
            port(contract.GRPC_PORT_NAME, p.workers.grpc_port),
            port(contract.METRICS_PORT_NAME, p.workers.metrics_port),
        ],
    )


def claim_spec(storage: StorageConfig) -> k8s.core.v1.PersistentVolumeClaimSpecArgs:
    """One ReadWriteMany claim shared by every worker (stacks without an object-store URI)."""
    return k8s.core.v1.PersistentVolumeClaimSpecArgs(
        access_modes=["ReadWriteMany"],
        storage_class_name=storage.storage_class,
        resources=k8s.core.v1.VolumeResourceRequirementsArgs(requests={"storage": storage.size}),
    )


def statefulset_spec(p: PodArgs) -> k8s.apps.v1.StatefulSetSpecArgs:
    """The worker StatefulSet's ``spec``; the pod template is :func:`infra.pod.pod_template`'s."""
    return k8s.apps.v1.StatefulSetSpecArgs(
        service_name=p.service_name,
        replicas=p.workers.replicas,
        pod_management_policy="Parallel",
        # The trainer restarts all workers together on a new template (module docstring).
        update_strategy=k8s.apps.v1.StatefulSetUpdateStrategyArgs(type="OnDelete"),
        selector=selector(p.identity),
        template=pod_template(p),
    )


def run_target(cfg: StackConfig) -> str:
    """What the run is asked to do: a change brings a finished run's workers back.

    The worker count is part of it only without an autoscaler (the HPA owns the count then).
    """
    t = cfg.training
    parts = [f"run={t.run_id}", f"epochs={t.epochs}", f"steps-per-epoch={t.steps_per_epoch}"]
    if not cfg.autoscaling.enabled:
        parts.append(f"replicas={cfg.workers.replicas}")
    return " ".join(parts)


def size_patch_metadata(args: WorkersArgs) -> k8s.meta.v1.ObjectMetaPatchArgs:
    """The ``StatefulSetPatch``'s ``metadata``: the StatefulSet, the run target, forced."""
    return k8s.meta.v1.ObjectMetaPatchArgs(
        name=args.pod.statefulset_name,
        namespace=args.pod.identity.namespace,
        annotations={
            contract.RUN_TARGET_ANNOTATION: args.run_target,
            PATCH_FORCE_ANNOTATION: "true",
        },
    )


def size_patch_name(name: str, target: str) -> str:
    """The patch's Pulumi name for the run target ``target`` (:func:`run_target`): a new target
    is a new resource (create, then the old one's delete gives up its fields), so the count is
    applied again exactly when the target changes."""
    digest = hashlib.sha256(target.encode()).hexdigest()[:10]
    return f"{name}-size-{digest}"


def pdb_spec(ident: Identity) -> k8s.policy.v1.PodDisruptionBudgetSpecArgs:
    """``maxUnavailable: 0``: a voluntary eviction (drain) must not break a running collective.

    Drain a node by scaling the job down (or deleting it) first.
    """
    return k8s.policy.v1.PodDisruptionBudgetSpecArgs(max_unavailable=0, selector=selector(ident))


class Workers(Component):
    """Headless Service, checkpoint claim, StatefulSet and PodDisruptionBudget.

    Attributes:
        statefulset: the worker StatefulSet resource (the HPA's target).
        statefulset_name, service_name: their names, as outputs.
    """

    statefulset: k8s.apps.v1.StatefulSet
    statefulset_name: pulumi.Output[str]
    service_name: pulumi.Output[str]

    def __init__(
        self, name: str, args: WorkersArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(COMPONENT_TYPE, name, opts)
        p = args.pod
        ident = p.identity
        service = k8s.core.v1.Service(
            f"{name}-headless",
            metadata=metadata(ident, p.service_name, COMPONENT_WORKER),
            spec=service_spec(p),
            opts=self.child_opts(),
        )
        sts_deps: list[pulumi.Resource] = [service]
        if p.claim_name is not None:
            claim = k8s.core.v1.PersistentVolumeClaim(
                f"{name}-checkpoints",
                metadata=metadata(ident, p.claim_name, "checkpoints"),
                spec=claim_spec(args.storage),
                opts=self.child_opts(
                    # Checkpoints outlive `pulumi destroy` unless the stack says Delete (the
                    # namespace is retained too: its deletion would take the claim with it).
                    retain_on_delete=args.retain_claim,
                    # Set by the cluster when the claim binds, never by the program, and
                    # immutable: a claim imported after a Retain destroy (docs/infra.md) holds
                    # them, and their absence from the program must not replace it (a new,
                    # empty volume).
                    ignore_changes=list(CLAIM_SERVER_FIELDS),
                ),
            )
            sts_deps.append(claim)
        self.statefulset = k8s.apps.v1.StatefulSet(
            name,
            metadata=metadata(
                ident,
                p.statefulset_name,
                COMPONENT_WORKER,
                labels=args.labels,
                annotations={contract.RUN_ID_ANNOTATION: p.training.run_id, **args.provenance},
            ),
            spec=statefulset_spec(p),
            opts=self.child_opts(
                depends_on=sts_deps,
                # Set at creation only: the size patch below, the HPA, a resize and the
                # trainer's scale to zero own it afterwards (module docstring).
                ignore_changes=["spec.replicas"],
                # A new runId is a new run: a fresh StatefulSet at `replicas` workers. Delete
                # first: the old pods hold the GPUs (and the names) the new ones need.
                replace_on_changes=[f'metadata.annotations["{contract.RUN_ID_ANNOTATION}"]'],
                delete_before_replace=True,
                custom_timeouts=CLOUD_TIMEOUTS if args.cloud else None,
            ),
        )
        k8s.apps.v1.StatefulSetPatch(
            size_patch_name(name, args.run_target),
            metadata=size_patch_metadata(args),
            spec=k8s.apps.v1.StatefulSetSpecPatchArgs(replicas=p.workers.replicas),
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
        k8s.policy.v1.PodDisruptionBudget(
            name,
            metadata=metadata(ident, p.statefulset_name, COMPONENT_WORKER),
            spec=pdb_spec(ident),
            opts=self.child_opts(),
        )
        self.statefulset_name = self.statefulset.metadata.apply(lambda m: m.name)
        self.service_name = service.metadata.apply(lambda m: m.name)
        self.register_outputs({"statefulset": self.statefulset_name, "service": self.service_name})
