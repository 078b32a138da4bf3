"""Per-cloud conventions (``clusterKind``): what each provider's GPU node pools, shared storage
and registry look like, as that provider documents them (docs/getting-started.md, "Per cloud").

A stack names its cloud once; the keys below then default to that cloud's convention. A key set
to anything but its declared default keeps the stack's value: the Pulumi CLI hands the program
declared defaults as if they were set, so "left at its default" is all the program can see
(an explicitly empty ``gpuTolerations`` on ``gke`` still gets GKE's; use ``clusterKind: cloud``
to opt out of every convention at once).

Stdlib only: the policy pack (``policy/facts.py``) reads the same table in its own venv.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

MINIKUBE = "minikube"
GENERIC_CLOUD = "cloud"
CLOUD_KEYS = ("gpuNodeSelector", "gpuTolerations", "checkpointStorageClass", "metadataEgress")
"""The stack keys a cloud gives defaults (:meth:`Cloud.settings`)."""


@dataclass(frozen=True)
class Cloud:
    """One provider's conventions, in the spelling of the stack keys they fill.

    Attributes:
        name: the ``clusterKind`` value.
        title: the provider's product name, for messages.
        gpu_node_selector: ``gpuNodeSelector`` entries the provider's GPU nodes carry
            (``key`` alone: the label is present, any value).
        gpu_tolerations: ``gpuTolerations`` entries for the taints its GPU pools carry
            (``key:Effect`` without a value tolerates any value).
        checkpoint_storage_class: a ReadWriteMany StorageClass the provider's CSI driver
            offers (``checkpointStorageClass``).
        registry_example: ``imageRegistry`` as the provider's registry names it.
        metadata_egress: ``metadataEgress`` entries (``CIDR:port``) of the metadata server
            that gives a pod its object-store credentials; none where a pod's identity comes
            without one.
    """

    name: str
    title: str
    gpu_node_selector: tuple[str, ...]
    gpu_tolerations: tuple[str, ...]
    checkpoint_storage_class: str
    registry_example: str
    metadata_egress: tuple[str, ...] = ()

    def settings(self) -> dict[str, Any]:
        """The stack keys this cloud gives defaults, as a stack file would write them."""
        values = (
            list(self.gpu_node_selector),
            list(self.gpu_tolerations),
            self.checkpoint_storage_class,
            list(self.metadata_egress),
        )
        return dict(zip(CLOUD_KEYS, values, strict=True))


CLOUDS: dict[str, Cloud] = {
    c.name: c
    for c in (
        # GKE labels GPU nodes with the accelerator type (nvidia-l4, nvidia-tesla-t4, ...) and
        # taints GPU pools nvidia.com/gpu=present:NoSchedule; Filestore CSI's class is
        # standard-rwx; Artifact Registry: <region>-docker.pkg.dev/<project>/<repository>.
        # Workload Identity's GKE metadata server: 169.254.169.254:80 with Dataplane V2, else
        # 169.254.169.252:988 (GKE's Workload Identity restrictions; docs/infra.md).
        Cloud(
            "gke",
            "GKE",
            ("cloud.google.com/gke-accelerator",),
            ("nvidia.com/gpu=present:NoSchedule",),
            "standard-rwx",
            "us-central1-docker.pkg.dev/my-project/tfd",
            ("169.254.169.254/32:80", "169.254.169.252/32:988"),
        ),
        # EKS GPU node groups carry k8s.amazonaws.com/accelerator (Karpenter:
        # karpenter.k8s.aws/instance-gpu-count) and are tainted nvidia.com/gpu with value
        # 'true' or none (Auto Mode): tolerate any value. EFS CSI: efs-sc; ECR:
        # <account>.dkr.ecr.<region>.amazonaws.com.
        Cloud(
            "eks",
            "EKS",
            ("k8s.amazonaws.com/accelerator",),
            ("nvidia.com/gpu:NoSchedule",),
            "efs-sc",
            "123456789012.dkr.ecr.us-east-1.amazonaws.com",
        ),
        # AKS labels GPU nodes kubernetes.azure.com/accelerator=nvidia and adds no GPU taint
        # (a user's sku=gpu:NoSchedule goes in gpuTolerations); Azure Files CSI:
        # azurefile-csi; ACR: <name>.azurecr.io.
        Cloud(
            "aks",
            "AKS",
            ("kubernetes.azure.com/accelerator=nvidia",),
            (),
            "azurefile-csi",
            "myregistry.azurecr.io",
        ),
    )
}
CLUSTER_KINDS = (MINIKUBE, GENERIC_CLOUD, *CLOUDS)
"""``clusterKind``'s values: every one but ``minikube`` is a cloud (:func:`is_cloud`)."""


def is_cloud(kind: str | None) -> bool:
    """Images are pushed to a registry and pinned by digest, a kube context or kubeconfig is
    required: every kind but ``minikube``."""
    return kind in CLUSTER_KINDS and kind != MINIKUBE


def with_cloud_defaults(
    kind: str | None,
    values: Mapping[str, Any],
    declared: Mapping[str, Any],
    read: Callable[[str, Any], Any] = lambda _key, value: value,
) -> dict[str, Any]:
    """``values`` (short key to value) with each key the cloud ``kind`` gives a default
    replaced by the cloud's where the value is still ``declared[key]`` (its declared default,
    in the form of ``values``); ``read(key, setting)`` turns the cloud's setting into that
    form. Other kinds leave ``values`` as they are."""
    out = dict(values)
    cloud = CLOUDS.get(kind or "")
    if cloud is None:
        return out
    for key, setting in cloud.settings().items():
        if key in out and out[key] == declared.get(key):
            out[key] = read(key, setting)
    return out
