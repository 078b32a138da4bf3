"""The keys of where and how the pods run: names and cluster, workers, checkpoint storage."""

from __future__ import annotations

from infra.config.clouds import CLUSTER_KINDS
from infra.config.key import (
    CHECKPOINT_URI,
    CHECKPOINT_URI_RULE,
    NAMESPACE_MODES,
    PORTS,
    RESOURCE_NAME,
    RETENTION_POLICIES,
    TOLERATION_RULE,
    Key,
    cidr_port,
    cidrs,
)
from infra.config.kinds import (
    Choice,
    Integers,
    Namespace,
    Quantity,
    Secret,
    Strings,
    Text,
    Whole,
    dns_label,
    node_label,
    toleration,
)
from trainer.contract import (
    DEFAULT_CLUSTER_DOMAIN,
    DEFAULT_GRPC_PORT,
    DEFAULT_METRICS_PORT,
    DNS_SUBDOMAIN,
    GPUS_PER_WORKER,
    REPLICAS,
    Interval,
)

GROUPS: dict[str, tuple[Key, ...]] = {
    "Names and cluster": (
        Key(
            "appName",
            dns_label(40, "must be at most 40 characters (pod names append suffixes)"),
            "tfd",
            "Prefix of every Kubernetes object name (DNS label, at most 40 characters); the "
            "StatefulSet is <appName>-worker, the headless Service <appName>-workers.",
        ),
        Key(
            "namespace",
            Namespace(),
            "tf-distributed",
            "Namespace of the training objects (DNS label; never default, kube-system, "
            "kube-public or kube-node-lease). With namespaceMode 'create' the stack creates it "
            "with Pod Security Admission 'restricted' enforced.",
        ),
        Key(
            "namespaceMode",
            Choice(NAMESPACE_MODES),
            "create",
            "'create': the stack creates the namespace, labels it (Pod Security 'restricted'), "
            "puts a default-deny NetworkPolicy and a ResourceQuota in it and deletes it on "
            "pulumi destroy (kept with checkpointRetention Retain); a namespace that already "
            "exists then fails the first pulumi up with AlreadyExists. 'existing': deploy into "
            "a namespace someone else owns: no Namespace resource (its labels, Pod Security "
            "level and quota stay its owner's, and destroy leaves it), and the stack's "
            "NetworkPolicies select only its own pods.",
        ),
        Key(
            "clusterKind",
            Choice(CLUSTER_KINDS),
            "minikube",
            "'minikube' (local tag built into minikube's Docker daemon, imagePullPolicy Never), "
            "'cloud' (any other cluster: image pushed to imageRegistry, pulled by digest), or "
            "a cloud by name, 'gke', 'eks' or 'aks': as 'cloud', and gpuNodeSelector, "
            "gpuTolerations and checkpointStorageClass left at their defaults take that "
            "cloud's conventions (docs/getting-started.md#per-cloud-settings).",
        ),
        Key(
            "kubeContext",
            Text(empty=True),
            "",
            "Kube context of the explicit Kubernetes provider. Empty with clusterKind minikube "
            "means 'minikube'; every other clusterKind needs this and/or kubeconfig.",
        ),
        Key(
            "kubeconfig",
            Secret(),
            "",
            "SECRET (pulumi config set --secret kubeconfig < file). Kubeconfig contents for the"
            " provider; empty uses KUBECONFIG / ~/.kube/config.",
        ),
        Key(
            "clusterDomain",
            Text(DNS_SUBDOMAIN, "must be a lowercase DNS domain"),
            DEFAULT_CLUSTER_DOMAIN,
            "Cluster DNS domain used in worker addresses "
            "(<pod>.<service>.<namespace>.svc.<domain>).",
        ),
        Key(
            "apiServerCidrs",
            cidrs("10.0.0.1/32"),
            [],
            "CIDRs of the Kubernetes API server endpoints, required. The workers call the API "
            "server for their own StatefulSet (scale it to zero when the run is done, notice a "
            "rollout, read the live replica count under an autoscaler); egress to these CIDRs "
            "on apiServerPorts is allowed.",
        ),
        Key(
            "apiServerPorts",
            Integers(1, 65535),
            [443],
            "TCP ports of the API server endpoints (443 for the kubernetes Service; minikube's "
            "apiserver listens on 8443).",
        ),
        Key(
            "egressHttpsCidrs",
            cidrs("0.0.0.0/0"),
            [],
            "CIDRs the workers may reach on TCP 443 (dataset downloads such as 'mnist', gs:// "
            "data and checkpoints). Empty = no egress beyond peers, DNS and the API "
            "server. A gs:// checkpointUri's credentials come from metadataEgress.",
        ),
        Key(
            "metadataEgress",
            Strings(cidr_port, "each entry must be CIDR:port such as '169.254.169.254/32:80'"),
            [],
            "The metadata server the workers get object-store credentials from, as CIDR:port "
            "entries, allowed only with a gs:// checkpointUri (GKE Workload Identity). "
            "clusterKind gke fills in GKE's metadata server (docs/infra.md); empty = none.",
        ),
        Key(
            "dnsEgressCidrs",
            cidrs("169.254.20.10/32"),
            ["169.254.20.10/32", "169.254.169.254/32"],
            "Resolvers outside kube-dns the pods may query on port 53 (UDP and TCP), besides "
            "the kube-dns pods. The defaults are NodeLocal DNSCache (169.254.20.10) and the "
            "metadata server that answers DNS on GKE with Cloud DNS (169.254.169.254); without "
            "them such clusters never resolve the workers' peers. Empty = kube-dns pods only.",
        ),
    ),
    "Workers": (
        Key(
            "replicas",
            Whole(REPLICAS),
            2,
            "Number of workers ({range}). With autoscaling it must lie within "
            "[autoscalingMinReplicas, autoscalingMaxReplicas] and the HPA owns it after "
            "creation.",
        ),
        Key(
            "gpusPerWorker",
            Whole(GPUS_PER_WORKER),
            0,
            "GPUs per worker ({range}). 0 = CPU only (no GPU limit, node selector or tolerations).",
        ),
        Key(
            "gpuResourceName",
            Text(RESOURCE_NAME, "must be an extended resource name 'domain/name'"),
            "nvidia.com/gpu",
            "Extended resource name requested as the GPU limit.",
        ),
        Key(
            "cpuRequest",
            Quantity("CPU"),
            "1",
            "CPU request per worker (Kubernetes quantity); the HPA's utilization is relative to"
            " it.",
        ),
        Key(
            "cpuLimit",
            Quantity("CPU"),
            "2",
            "CPU limit per worker (quantity, >= cpuRequest).",
        ),
        Key(
            "memoryRequest",
            Quantity("memory"),
            "2Gi",
            "Memory request per worker (quantity).",
        ),
        Key(
            "memoryLimit",
            Quantity("memory"),
            "4Gi",
            "Memory limit per worker (quantity, >= memoryRequest).",
        ),
        Key(
            "gpuNodeSelector",
            Strings(node_label, "each entry must be a node label 'key=value', or 'key' alone"),
            [],
            "Node labels GPU workers must run on: 'key=value', or 'key' alone (the label is "
            "present, any value); ignored when gpusPerWorker is 0. Empty on gke, eks and aks: "
            "that cloud's GPU node label.",
        ),
        Key(
            "gpuTolerations",
            Strings(toleration, TOLERATION_RULE),
            [],
            "Taints GPU workers tolerate, 'key[=value]:Effect' (no value: any value); ignored "
            "when gpusPerWorker is 0. Empty on gke and eks: that cloud's GPU taint (aks adds "
            "none).",
        ),
        Key(
            "terminationGracePeriodSeconds",
            Whole(Interval(30, 3600)),
            120,
            "Seconds between SIGTERM and SIGKILL ({range}) for the preemption checkpoint; must "
            "exceed collectiveTimeoutSeconds.",
        ),
        Key(
            "grpcPort",
            Whole(PORTS),
            DEFAULT_GRPC_PORT,
            "Container port of the TensorFlow gRPC/collective server ({range}).",
        ),
        Key(
            "metricsPort",
            Whole(PORTS),
            DEFAULT_METRICS_PORT,
            "Container port of /metrics, /healthz and /readyz ({range}, not grpcPort).",
        ),
    ),
    "Checkpoint storage": (
        Key(
            "checkpointStorageClass",
            Text(DNS_SUBDOMAIN, "must be a StorageClass name (DNS subdomain)"),
            "standard",
            "StorageClass of the shared ReadWriteMany checkpoint claim; 'standard' on gke, eks "
            "and aks means that cloud's ReadWriteMany class (standard-rwx, efs-sc, "
            "azurefile-csi).",
        ),
        Key(
            "checkpointSize",
            Quantity("storage", whole=True),
            "10Gi",
            "Size of the shared checkpoint claim (quantity of bytes).",
        ),
        Key(
            "checkpointUri",
            Text(CHECKPOINT_URI, CHECKPOINT_URI_RULE, empty=True),
            "",
            "gs:// checkpoint location instead of the shared claim (no claim is "
            "created; the pods need credentials for the bucket). Runs go to "
            "<checkpointUri>/<project>/<stack>/<runId>, so stacks can share a bucket. s3:// is "
            "refused (TensorFlow 2.21 has no S3 filesystem): on AWS leave it empty and set "
            "checkpointStorageClass to an EFS class.",
        ),
        Key(
            "checkpointRetention",
            Choice(RETENTION_POLICIES),
            "Retain",
            "'Retain' keeps the checkpoint claim and the training namespace that holds it on "
            "pulumi destroy (deleting the namespace would delete the claim); if you later "
            "delete the namespace by hand, the StorageClass's reclaimPolicy decides whether the"
            " volume goes too. 'Delete' lets pulumi destroy delete both. No effect with "
            "checkpointUri.",
        ),
    ),
}
