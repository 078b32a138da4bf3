"""The real node's configuration, rendered from its names, ports and directories (pure:
nothing here touches the host). ``tools/real_node.py`` starts the node with it."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tools import node_images
from tools.object_store import API_HOSTS, METADATA_HOST

NODE_NAME = "tfd-node-0"
NODE_IP = "10.250.0.1"
DNS_IP = "169.254.20.10"
POD_SUBNET = "10.244.0.0/24"
POD_GATEWAY = "10.244.0.1"
CLUSTER_DOMAIN = "cluster.local"
GOOGLE_APIS_IP = "199.36.153.8"
"""The first address of ``private.googleapis.com``, where GKE's Private Google Access DNS sends
``*.googleapis.com``: the node's CoreDNS answers Google's API names with it, and the object-store
stand-in listens there (``tools.object_store.OnHost``)."""
METADATA_IP = "169.254.169.252"
"""GKE's metadata server as pods reach it without Dataplane V2, the name CoreDNS gives
``metadata.google.internal`` (``169.254.169.254`` is left to the host's own)."""
SERVICE_CIDR = "10.96.0.0/16"  # tools/cluster.py's
CNI_BIN = "/usr/lib/cni"
NAMESPACE_K8S = "k8s.io"
# The kubelet's device-plugin directory: its device manager serves kubelet.sock at this fixed
# path (pkg/kubelet/cm/devicemanager: pluginapi.KubeletSocket), whatever its --root-dir.
DEVICE_PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")
GPU_RESOURCE = "nvidia.com/gpu"
STAND_IN_GPUS = 2
"""Devices of ``GPU_RESOURCE`` the stand-in device plugin (tools/devplugin) advertises: fewer
than three workers, so a third one stays Pending (tests/e2e/test_real_gpu.py)."""


BRIDGE_PREFIX = "tfdbr"
"""Every real node's bridge name starts so: ``cluster up`` finds the ones a dead node left."""


@dataclass(frozen=True)
class Names:
    """Host names and paths of one checkout's node: unique per checkout, short enough for Linux
    (interface names are at most 15 bytes)."""

    bridge: str
    cgroup: str

    @classmethod
    def for_root(cls, root: Path) -> Names:
        return cls.for_tag(hashlib.sha256(str(root).encode()).hexdigest()[:6])

    @classmethod
    def for_tag(cls, tag: str) -> Names:
        """The names of the node whose checkout hashes to ``tag`` (its bridge's suffix)."""
        return cls(bridge=f"{BRIDGE_PREFIX}{tag}", cgroup=f"tfd-node-{tag}")


@dataclass(frozen=True)
class Ports:
    api: int
    kubelet: int
    kubelet_healthz: int
    proxy_metrics: int
    proxy_healthz: int
    metrics_server: int


def registry_hosts_dir(state: Path) -> Path:
    """containerd's ``config_path``: ``<host:port>/hosts.toml`` per registry, as a cloud node's
    pull rights to its registry (``tools/registry.py`` writes one)."""
    return state / "containerd" / "certs.d"


def containerd_config(state: Path, root: Path) -> str:
    """containerd 1.6's config (TOML v2): images and snapshots in ``root`` (a cache kept between
    clusters, like the Docker daemon's data root), everything else under ``state``."""
    cd = state / "containerd"
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""version = 2
root = "{root}"
state = "{cd / "state"}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]

[grpc]
  address = "{cd / "containerd.sock"}"

[ttrpc]
  address = "{cd / "containerd.sock.ttrpc"}"

[plugins."io.containerd.internal.v1.opt"]
  path = "{cd / "opt"}"

[{cri}]
  sandbox_image = "{node_images.PAUSE_IMAGE}"
  # Network namespaces under our state directory, not /run/netns (`ip netns` stays untouched).
  netns_mounts_under_state_dir = true
  # This machine withholds CAP_SYS_RESOURCE: runc cannot lower oom_score_adj (the kubelet asks
  # -998 for sandboxes), so containerd keeps every score at or above its own.
  restrict_oom_score_adj = true
  [{cri}.containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [{cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{cri}.containerd.runtimes.runc.options]
        Root = "{cd / "runc"}"
        SystemdCgroup = false
  # Registry hosts (trust, credentials) per host: read at each pull, so a registry started
  # after the node (tools/registry.py) is written here when it starts.
  [{cri}.registry]
    config_path = "{registry_hosts_dir(state)}"
  [{cri}.cni]
    bin_dir = "{CNI_BIN}"
    conf_dir = "{state / "cni" / "net.d"}"
    max_conf_num = 1
"""


def cni_config(names: Names, state: Path) -> dict:
    """One bridge for the node's pods; no masquerade (pods only talk inside this machine)."""
    return {
        "cniVersion": "0.4.0",
        "name": "tfd-pods",
        "plugins": [
            {
                "type": "bridge",
                "bridge": names.bridge,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": POD_SUBNET, "gateway": POD_GATEWAY}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(state / "cni" / "ipam"),
                },
            }
        ],
    }


def kubelet_config(names: Names, ports: Ports, state: Path, pki: Path) -> dict:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": NODE_IP,
        "port": ports.kubelet,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": ports.kubelet_healthz,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(pki / "ca.crt")},
        },
        "authorization": {"mode": "Webhook"},
        "tlsCertFile": str(pki / "kubelet-serving.crt"),
        "tlsPrivateKeyFile": str(pki / "kubelet-serving.key"),
        "containerRuntimeEndpoint": f"unix://{state / 'containerd' / 'containerd.sock'}",
        "cgroupDriver": "cgroupfs",
        # Every pod's cgroup lives under this checkout's own root: `down` finds them all there.
        "cgroupRoot": f"/{names.cgroup}",
        # This machine mounts cgroup v1; the kubelet refuses it unless told (FailCgroupV1).
        "failCgroupV1": False,
        "failSwapOn": False,
        "clusterDNS": [DNS_IP],
        "clusterDomain": CLUSTER_DOMAIN,
        # The host's resolv.conf search list has no meaning inside the cluster.
        "resolvConf": "",
        # A shared disk: only evict when it is really full.
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        # No image garbage collection: every image here was imported (nothing can be pulled
        # again), and the kubelet measures the shared disk's use as capacity minus available,
        # so other files on it once made it delete the sandbox image mid-suite. The default
        # thresholds (85/80%) would start that at 85% of the host's disk.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False,
        "shutdownGracePeriod": "0s",
        "protectKernelDefaults": False,
    }


def corefile(kubeconfig: Path, context: str) -> str:
    """CoreDNS: the cluster's zones from the API server, bound to the NodeLocal address only.
    Outside the cluster only Google's API and metadata names resolve, to the object-store
    stand-in's addresses (no upstream can be reached here)."""
    return f""".:53 {{
    bind {DNS_IP}
    errors
    hosts {{
        {GOOGLE_APIS_IP} {" ".join(API_HOSTS)}
        {METADATA_IP} {METADATA_HOST}
        fallthrough
    }}
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {kubeconfig} {context}
        pods insecure
        ttl 5
    }}
}}
"""


def metrics_api(ports: Ports, ca_bundle: str) -> list[dict]:
    """The APIService of metrics-server, its selectorless Service and the Endpoints (the
    endpoint-slice mirroring controller makes the EndpointSlice the aggregator routes to)."""
    meta = {"name": "metrics-server", "namespace": "kube-system"}
    return [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": meta,
            "spec": {"ports": [{"name": "https", "port": 443, "targetPort": ports.metrics_server}]},
        },
        {
            "apiVersion": "v1",
            "kind": "Endpoints",
            "metadata": meta,
            "subsets": [
                {
                    "addresses": [{"ip": NODE_IP}],
                    "ports": [{"name": "https", "port": ports.metrics_server}],
                }
            ],
        },
        {
            "apiVersion": "apiregistration.k8s.io/v1",
            "kind": "APIService",
            "metadata": {"name": "v1beta1.metrics.k8s.io"},
            "spec": {
                "group": "metrics.k8s.io",
                "version": "v1beta1",
                "service": {"name": "metrics-server", "namespace": "kube-system", "port": 443},
                "caBundle": ca_bundle,
                "groupPriorityMinimum": 100,
                "versionPriority": 100,
            },
        },
    ]


def storage_documents(
    classes: tuple[str, ...], per_class: int, source: Callable[[str], dict]
) -> list[dict]:
    """StorageClasses without a provisioner, each with ``per_class`` ReadWriteMany volumes the
    PV controller can bind; ``source(volume_name)`` gives each volume's source fields (a
    ``hostPath`` on kwok's nodes, a ``local`` path pinned to the real node)."""
    docs: list[dict] = []
    for sc in classes:
        docs.append(
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "StorageClass",
                "metadata": {"name": sc},
                "provisioner": "kubernetes.io/no-provisioner",
                "volumeBindingMode": "Immediate",
                "reclaimPolicy": "Retain",
            }
        )
        for i in range(per_class):
            name = f"{sc}-{i}"
            docs.append(
                {
                    "apiVersion": "v1",
                    "kind": "PersistentVolume",
                    "metadata": {"name": name, "labels": {"tfd-e2e/volume": sc}},
                    "spec": {
                        "storageClassName": sc,
                        "capacity": {"storage": "500Gi"},
                        "accessModes": ["ReadWriteMany", "ReadWriteOnce"],
                        "persistentVolumeReclaimPolicy": "Retain",
                        **source(name),
                    },
                }
            )
    return docs


def storage(state: Path, classes: tuple[str, ...], per_class: int) -> list[dict]:
    """StorageClasses with ``local`` volumes on the node, in directories anyone may write (the
    trainer runs as UID 10001; a local volume gets no fsGroup ownership change)."""
    on_the_node = {
        "required": {
            "nodeSelectorTerms": [
                {
                    "matchExpressions": [
                        {"key": "kubernetes.io/hostname", "operator": "In", "values": [NODE_NAME]}
                    ]
                }
            ]
        }
    }
    return storage_documents(
        classes,
        per_class,
        lambda name: {
            "local": {"path": str(state / "volumes" / name)},
            "nodeAffinity": on_the_node,
        },
    )
