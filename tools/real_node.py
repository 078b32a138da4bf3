"""A real node for the local cluster (``python -m tools.cluster up --node real``).

Everything runs on this machine as processes the cluster records (and ``down`` stops):

* containerd (Debian) with runc, the CNI ``bridge`` plugin (Debian's containernetworking-plugins)
  on a bridge of its own, and images imported from OCI archives (nothing can be pulled);
* the kubelet and kube-proxy (nftables mode) of the control plane's Kubernetes version;
* CoreDNS on the NodeLocal DNSCache address (``169.254.20.10``) of the node's bridge, so the
  stacks' NetworkPolicy ``dns`` rule (``dnsEgressCidrs``) allows it as it does on GKE;
* kube-router's firewall (iptables and ipsets), which enforces NetworkPolicy;
* metrics-server behind an APIService, so ``kubectl top`` and the HPA have CPU metrics;
* a stand-in device plugin (``tools/devplugin``) that gives the node ``STAND_IN_GPUS``
  ``nvidia.com/gpu`` devices through the kubelet's device-plugin API (no real GPU);
* StorageClasses ``standard`` and ``standard-rwx`` with ``local`` volumes in the cluster's own
  directory (one node: ReadWriteMany is real).

The API server listens on the node's address (``10.250.0.1``, also on the bridge), so pods
reach it as the ``kubernetes`` Service's endpoint. The bridge and cgroup names carry ``tfd`` and
a hash of the checkout. What the kubelet changes on the host (kernel tunables,
iptables canary chains) is recorded at ``up`` and put back at ``down``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from tools import node_host, node_images
from tools.node_host import NodeError
from tools.real_node_config import (
    DEVICE_PLUGIN_DIR,
    DNS_IP,
    GPU_RESOURCE,
    NODE_IP,
    NODE_NAME,
    SERVICE_CIDR,
    STAND_IN_GPUS,
    Names,
    Ports,
    cni_config,
    containerd_config,
    corefile,
    kubelet_config,
    metrics_api,
    storage,
)

__all__ = ["NODE_IP", "NODE_NAME"]

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / ".tools" / "bin"
NAMES = Names.for_root(ROOT)
CLIENT = "extendedKeyUsage=clientAuth"
# The API server's certificate also names the node's address (pods and host clients use it).
API_SANS = (f"IP:{NODE_IP}",)
# Client certificates: the kubelet as its node (Node authorizer, NodeRestriction), kube-proxy as
# the user its default binding names, the API server towards kubelets; the add-ons are cluster
# admins (a test cluster: no RBAC of their own to keep in step). Serving certificates for the
# kubelet and metrics-server, signed by the cluster CA that their clients trust.
CERTS = {
    "kubelet": (f"/O=system:nodes/CN=system:node:{NODE_NAME}", CLIENT),
    "kube-proxy": ("/CN=system:kube-proxy", CLIENT),
    "apiserver-kubelet-client": ("/O=system:masters/CN=kube-apiserver-kubelet-client", CLIENT),
    "front-proxy-client": ("/CN=front-proxy-client", CLIENT),
    "coredns": ("/O=system:masters/CN=tfd-coredns", CLIENT),
    "metrics-server": ("/O=system:masters/CN=tfd-metrics-server", CLIENT),
    "kube-router": ("/O=system:masters/CN=tfd-kube-router", CLIENT),
    "kubelet-serving": (
        f"/CN={NODE_NAME}",
        f"subjectAltName=IP:{NODE_IP},DNS:{NODE_NAME}\nextendedKeyUsage=serverAuth",
    ),
    "metrics-server-serving": (
        "/CN=metrics-server",
        "subjectAltName=DNS:metrics-server.kube-system.svc,IP:"
        f"{NODE_IP}\nextendedKeyUsage=serverAuth",
    ),
}
USERS = ("kubelet", "kube-proxy", "coredns", "metrics-server", "kube-router")
# containerd's images and snapshots, kept between clusters: importing the trainer image (2.4 GB)
# takes minutes, a second import of the same build is skipped.
CONTAINERD_ROOT = Path(
    os.environ.get("TFD_CONTAINERD_DATA", Path.home() / ".cache" / "tf-distributed" / "containerd")
)
START_TIMEOUT_S = 120
DEVICE_PLUGIN_SOCKET = "tfd-stand-in-gpu.sock"
KUBELET_CHECKPOINT = "kubelet_internal_checkpoint"
"""The kubelet's record of allocated devices, in the device-plugin directory (outside the
cluster's): removed at ``down`` with the plugin's socket."""

Start = Callable[..., int]
Kubectl = Callable[..., str]
Wait = Callable[..., None]


def _marker(state: Path) -> Path:
    return state / "real-node.json"


def was_up(state: Path) -> bool:
    return _marker(state).exists()


def preflight() -> None:
    """The host tools the node needs, named with the package that has them."""
    needs = {
        "containerd": "containerd",
        "runc": "runc",
        "ctr": "containerd",
        "nft": "nftables",
        "ip": "iproute2",
        "ipset": "ipset",
        "iptables-save": "iptables",
    }
    for tool, package in needs.items():
        if not shutil.which(tool):
            raise NodeError(f"{tool} missing: apt-get install {package} (or `make tools`)")
    if not Path("/usr/lib/cni/bridge").exists():
        raise NodeError("/usr/lib/cni/bridge missing: apt-get install containernetworking-plugins")
    node_tools = ("kubelet", "kube-proxy", "coredns", "kube-router", "metrics-server", "pause")
    for tool in (*node_tools, "devplugin"):
        if not (BIN / tool).exists():
            raise NodeError(f"{BIN / tool} missing: run `make tools` first")


def apiserver_flags(pki: Path) -> list[str]:
    """The API server as a real node needs it: Node authorizer, kubelet client certificate,
    the aggregation layer for metrics-server (routed to its endpoint, not a ClusterIP)."""
    return [
        "--authorization-mode=Node,RBAC",
        f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
        f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
        f"--kubelet-certificate-authority={pki / 'ca.crt'}",
        "--kubelet-preferred-address-types=InternalIP",
        f"--requestheader-client-ca-file={pki / 'ca.crt'}",
        "--requestheader-allowed-names=front-proxy-client",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-username-headers=X-Remote-User",
        f"--proxy-client-cert-file={pki / 'front-proxy-client.crt'}",
        f"--proxy-client-key-file={pki / 'front-proxy-client.key'}",
        "--enable-aggregator-routing=true",
    ]


def host_up(state: Path) -> None:
    """The node's interfaces and cgroups, after recording what ``down`` must put back."""
    for d in ("containerd", "cni/net.d", "cni/ipam", "kubelet", "volumes", "node"):
        (state / d).mkdir(parents=True, exist_ok=True)
    node_host.save_before(state / "node" / "host-before.json")
    _marker(state).write_text(json.dumps({"names": NAMES.__dict__, "node": NODE_NAME}))
    node_host.network_up(NAMES)
    node_host.make_cgroups(NAMES)


def _import_image(sock: Path, archive: bytes) -> None:
    node_host.run(
        "ctr", "--address", str(sock), "-n", "k8s.io", "images", "import", "-", stdin=archive
    )


def remove_stale_containers(sock: Path) -> None:
    """Containers a previous cluster left in the kept root (stopped, never running: ``down``
    kills every process of the node) go before the kubelet starts, with their snapshots."""
    ctr = ("ctr", "--address", str(sock), "-n", "k8s.io")
    for task in node_host.run(*ctr, "tasks", "ls", "-q").split():
        node_host.run(*ctr, "tasks", "delete", "-f", task, check=False)
    ids = node_host.run(*ctr, "containers", "ls", "-q").split()
    if ids:
        node_host.run(*ctr, "containers", "rm", *ids, check=False)


def import_images(sock: Path) -> None:
    """The sandbox image and the node's busybox image, built here (nothing can be pulled)."""
    _import_image(sock, node_images.oci_archive(node_images.pause_image(BIN / "pause")))
    _import_image(sock, node_images.oci_archive(node_images.busybox_image(Path("/bin/busybox"))))


def node_up(
    state: Path,
    pki: Path,
    api_port: int,
    *,
    start: Start,
    kubectl: Kubectl,
    wait: Wait,
    tool: Callable[[str], str],
) -> None:
    """containerd, kubelet, kube-proxy, CoreDNS, kube-router (policies) and metrics-server, each
    waited for before the next, until the node is Ready and the metrics API answers."""
    ports = Ports(
        api=api_port, kubelet=node_host.free_port(), kubelet_healthz=node_host.free_port(),
        proxy_metrics=node_host.free_port(), proxy_healthz=node_host.free_port(),
        metrics_server=node_host.free_port(),
    )  # fmt: skip
    cd = state / "containerd"
    sock = cd / "containerd.sock"
    (cd / "config.toml").write_text(containerd_config(state, CONTAINERD_ROOT))
    (state / "cni" / "net.d" / "10-tfd.conflist").write_text(json.dumps(cni_config(NAMES, state)))
    start("containerd", ["containerd", "--config", str(cd / "config.toml")])
    wait("containerd", lambda: node_host.run("ctr", "--address", str(sock), "version"))
    remove_stale_containers(sock)
    import_images(sock)

    kubelet_dir = state / "kubelet"
    config = kubelet_config(NAMES, ports, state, pki)
    (state / "node" / "kubelet.json").write_text(json.dumps(config, indent=2))
    start(
        "kubelet",
        [
            tool("kubelet"), f"--config={state / 'node' / 'kubelet.json'}",
            f"--kubeconfig={state / 'kubelet.kubeconfig'}", f"--root-dir={kubelet_dir}",
            f"--cert-dir={kubelet_dir / 'pki'}", f"--hostname-override={NODE_NAME}",
            f"--node-ip={NODE_IP}", "--v=1",
        ],
    )  # fmt: skip

    def node_ready() -> bool:
        out = kubectl(
            "get", "node", NODE_NAME, "-o",
            'jsonpath={.status.conditions[?(@.type=="Ready")].status}', check=False,
        )  # fmt: skip
        return out.strip() == "True"

    wait(f"node {NODE_NAME} Ready", node_ready, START_TIMEOUT_S)
    # The stand-in GPUs: the plugin registers with the kubelet's socket (there once the node
    # is Ready), and the kubelet puts its devices in the node's capacity.
    start(
        "devplugin",
        [tool("devplugin"), f"--dir={DEVICE_PLUGIN_DIR}", f"--resource={GPU_RESOURCE}",
         f"--count={STAND_IN_GPUS}", f"--endpoint={DEVICE_PLUGIN_SOCKET}"],
    )  # fmt: skip

    def gpus_allocatable() -> bool:
        node = json.loads(kubectl("get", "node", NODE_NAME, "-o", "json", check=False) or "{}")
        return node.get("status", {}).get("allocatable", {}).get(GPU_RESOURCE) == str(STAND_IN_GPUS)

    wait(f"{STAND_IN_GPUS} {GPU_RESOURCE} on {NODE_NAME} (devplugin)", gpus_allocatable)
    start(
        "kube-proxy",
        [
            tool("kube-proxy"), f"--kubeconfig={state / 'kube-proxy.kubeconfig'}",
            f"--hostname-override={NODE_NAME}", "--proxy-mode=nftables",
            "--cluster-cidr=10.244.0.0/24", f"--nodeport-addresses={NODE_IP}/32",
            f"--metrics-bind-address=127.0.0.1:{ports.proxy_metrics}",
            f"--healthz-bind-address=127.0.0.1:{ports.proxy_healthz}",
            # Leave the host's conntrack sysctls as they are (shared machine).
            "--conntrack-max-per-core=0", "--conntrack-tcp-timeout-established=0",
            "--conntrack-tcp-timeout-close-wait=0",
        ],
    )  # fmt: skip
    (state / "node" / "Corefile").write_text(corefile(state / "coredns.kubeconfig", "tfd-e2e"))
    start("coredns", [tool("coredns"), "-conf", str(state / "node" / "Corefile")])

    # NetworkPolicy: kube-router's firewall alone (iptables and ipsets). kube-network-policies
    # needs nftables' `queue` expression, which this kernel lacks (docs/e2e.md).
    start(
        "kube-router",
        [
            tool("kube-router"), f"--kubeconfig={state / 'kube-router.kubeconfig'}",
            f"--hostname-override={NODE_NAME}", "--run-firewall=true", "--run-router=false",
            "--run-service-proxy=false", "--run-loadbalancer=false", "--enable-cni=false",
            "--enable-ipv6=false", "--health-port=0", "--metrics-port=0",
            f"--service-cluster-ip-range={SERVICE_CIDR}", "--v=1",
        ],
    )  # fmt: skip

    ms = state / "metrics-server.kubeconfig"
    start(
        "metrics-server",
        [
            tool("metrics-server"), f"--kubeconfig={ms}", f"--authentication-kubeconfig={ms}",
            f"--authorization-kubeconfig={ms}", f"--bind-address={NODE_IP}",
            f"--secure-port={ports.metrics_server}",
            f"--tls-cert-file={pki / 'metrics-server-serving.crt'}",
            f"--tls-private-key-file={pki / 'metrics-server-serving.key'}",
            f"--kubelet-certificate-authority={pki / 'ca.crt'}",
            "--kubelet-preferred-address-types=InternalIP", "--kubelet-use-node-status-port",
            "--metric-resolution=15s",
        ],
    )  # fmt: skip
    ca_bundle = node_host.file_b64(pki / "ca.crt")
    docs = metrics_api(ports, ca_bundle)
    kubectl(
        "create", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs})
    )

    def metrics_available() -> bool:
        out = kubectl(
            "get", "apiservice", "v1beta1.metrics.k8s.io", "-o",
            'jsonpath={.status.conditions[?(@.type=="Available")].status}', check=False,
        )  # fmt: skip
        return out.strip() == "True"

    wait("metrics API (metrics-server)", metrics_available, START_TIMEOUT_S)
    wait(f"cluster DNS on {DNS_IP}", lambda: _dns_answers("kubernetes.default.svc.cluster.local"))


def _dns_answers(name: str) -> bool:
    """CoreDNS answers for ``name`` (busybox nslookup from the host, straight at it)."""
    result = subprocess.run(
        ["busybox", "nslookup", name, DNS_IP], capture_output=True, text=True, check=False
    )
    return result.returncode == 0 and "10.96.0.1" in result.stdout


def volumes(state: Path, classes: tuple[str, ...], per_class: int) -> list[dict]:
    """The StorageClasses and local volumes, their directories made writable by any UID."""
    docs = storage(state, classes, per_class)
    for doc in docs:
        if doc["kind"] == "PersistentVolume":
            path = Path(doc["spec"]["local"]["path"])
            path.mkdir(parents=True, exist_ok=True)
            path.chmod(0o777)
    return docs


def drain(kubectl: Kubectl, *, quiet: bool, timeout: float = 90) -> None:
    """Stop every pod through the kubelet (CNI teardown, volumes unmounted): cordon the node,
    delete its pods, and wait until none is bound to it (controllers' replacements stay
    Pending on the cordoned node)."""
    kubectl("cordon", NODE_NAME, check=False)
    kubectl("delete", "pods", "--all", "-A", "--grace-period=2", "--wait=false", check=False)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = kubectl(
            "get", "pods", "-A", f"--field-selector=spec.nodeName={NODE_NAME}", "-o", "name",
            check=False,
        )  # fmt: skip
        if not out.strip():
            return
        time.sleep(1)
    if not quiet:
        print(f"cluster down: pods still on {NODE_NAME} after {timeout:.0f} s", flush=True)


def host_down(state: Path) -> list[str]:
    """After the processes stopped: what is left of pods (their processes, shims, mounts,
    cgroups), the interfaces, netfilter tables and chains, the kernel tunables. Returns what
    could not be removed."""
    problems: list[str] = []
    names = NAMES
    sock = state / "containerd" / "containerd.sock"
    leftover = node_host.cgroup_pids(names) | node_host.shim_pids(sock)
    node_host.kill_pids(leftover)
    if alive := node_host.wait_gone(leftover, 10):
        problems.append(f"processes still alive: {sorted(alive)}")
    ours = [*node_host.mounts_under(state), *node_host.mounts_under(CONTAINERD_ROOT)]
    for point in ours:
        node_host.run("umount", point, check=False)
    for point in [*node_host.mounts_under(state), *node_host.mounts_under(CONTAINERD_ROOT)]:
        node_host.run("umount", "-l", point, check=False)
    problems += [f"cgroup not removed: {d}" for d in node_host.remove_cgroups(names)]
    node_host.network_down(names)
    for name in (DEVICE_PLUGIN_SOCKET, KUBELET_CHECKPOINT):
        (DEVICE_PLUGIN_DIR / name).unlink(missing_ok=True)
    before = node_host.load_before(state / "node" / "host-before.json")
    if before is not None:
        node_host.restore_host(before)
    if node_host.mounts_under(state):
        problems.append(f"mounts left under {state}: {node_host.mounts_under(state)}")
    else:
        for d in ("containerd", "cni", "kubelet", "volumes", "node"):
            shutil.rmtree(state / d, ignore_errors=True)
    _marker(state).unlink(missing_ok=True)
    return problems
