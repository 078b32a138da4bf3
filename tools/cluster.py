"""A local Kubernetes control plane with kwok nodes, for the e2e tests (`make cluster-up`).

``python tools/cluster.py up`` starts, on loopback only and as a fresh cluster each time:
etcd, kube-apiserver (RBAC, Pod Security admission), kube-controller-manager, kube-scheduler and
kwok, whose two nodes stand in for kubelets (pods are scheduled, admitted and reach Ready; no
container runs):

* ``tfd-cpu-0``: a CPU node;
* ``tfd-gpu-0``: a GPU node with ``nvidia.com/gpu`` capacity, the label and the taint that
  ``Pulumi.prod.yaml`` selects and tolerates.

It also creates the StorageClasses the stacks name (``standard``, ``standard-rwx``, and the
per-cloud stacks' ``efs-sc`` and ``azurefile-csi``) with
pre-provisioned ReadWriteMany volumes, since nothing provisions volumes here. The admin
kubeconfig is written to ``.tools/kubeconfig`` (context ``tfd-e2e``).

``python tools/cluster.py down`` stops only the processes ``up`` started (by the PIDs it
recorded) and deletes the cluster's data; logs stay in ``.tools/cluster/logs``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):  # run as `python tools/cluster.py`: make `tools` importable
    sys.path.insert(0, str(ROOT))

from tools import node_host, real_node, real_node_config  # noqa: E402

TOOLS = ROOT / ".tools"
BIN = TOOLS / "bin"
STATE = TOOLS / "cluster"
KUBECONFIG = TOOLS / "kubeconfig"
CONTEXT = "tfd-e2e"
SERVICE_CIDR = "10.96.0.0/16"
POD_CIDR = "10.244.0.0/16"
CPU_NODE = "tfd-cpu-0"
GPU_NODE = "tfd-gpu-0"
GPU_LABEL = ("cloud.google.com/gke-accelerator", "nvidia-tesla-t4")
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
CLOUD_GPU_NODES = {
    # GKE's pools are the GPU node above (its label, its taint).
    "eks": (
        "tfd-gpu-eks",
        {"k8s.amazonaws.com/accelerator": "nvidia-a10g"},
        [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}],
    ),
    "aks": ("tfd-gpu-aks", {"kubernetes.azure.com/accelerator": "nvidia"}, []),
}
"""GPU nodes labelled and tainted as EKS and AKS GPU pools are (docs/getting-started.md, per
cloud): ``(name, labels, taints)``. Not started with the cluster: the per-cloud test adds them
for its own stacks (an untainted AKS node would take other tests' CPU pods)."""
STORAGE_CLASSES = ("standard", "standard-rwx", "efs-sc", "azurefile-csi")
VOLUMES_PER_CLASS = 12
START_TIMEOUT_S = 90


class ClusterError(RuntimeError):
    """The cluster could not be started or stopped; the message says which part and why."""


SETUP_ERRORS = (ClusterError, node_host.NodeError, subprocess.CalledProcessError, OSError)
"""What starting a part can raise: a readiness probe retries on them, and ``main`` reports them
in one line and stops what had started."""


def _tool(name: str) -> str:
    path = BIN / name
    if not path.exists():
        raise ClusterError(f"{path} missing: run `make tools` first")
    return str(path)


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _make_pki(
    pki: Path, extra_sans: Sequence[str] = (), extra_certs: dict[str, tuple[str, str]] | None = None
) -> None:
    """A throw-away CA, the apiserver's serving cert, client certs and the SA signing key."""
    pki.mkdir(parents=True)
    _openssl(
        "req", "-x509", "-new", "-nodes", "-newkey", "rsa:2048", "-days", "2",
        "-keyout", "ca.key", "-out", "ca.crt", "-subj", "/CN=tfd-e2e-ca", cwd=pki,
    )  # fmt: skip
    sans = (
        "subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,"
        "DNS:kubernetes.default,DNS:kubernetes.default.svc,"
        "DNS:kubernetes.default.svc.cluster.local"
    ) + "".join(f",{san}" for san in extra_sans)
    certs = {
        "apiserver": ("/CN=kube-apiserver", sans + "\nextendedKeyUsage=serverAuth"),
        "admin": ("/O=system:masters/CN=tfd-e2e-admin", "extendedKeyUsage=clientAuth"),
        "controller-manager": ("/CN=system:kube-controller-manager", "extendedKeyUsage=clientAuth"),
        "scheduler": ("/CN=system:kube-scheduler", "extendedKeyUsage=clientAuth"),
        "kwok": ("/O=system:masters/CN=kwok-controller", "extendedKeyUsage=clientAuth"),
        **(extra_certs or {}),
    }
    for name, (subject, ext) in certs.items():
        (pki / f"{name}.ext").write_text(ext + "\n")
        _openssl(
            "req", "-new", "-nodes", "-newkey", "rsa:2048", "-keyout", f"{name}.key",
            "-out", f"{name}.csr", "-subj", subject, cwd=pki,
        )  # fmt: skip
        _openssl(
            "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.crt",
            cwd=pki,
        )  # fmt: skip
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=pki)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=pki)


def kubeconfig_text(server: str, pki: Path, user: str) -> str:
    """A self-contained kubeconfig (certificates inline) for ``user``'s client certificate."""
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": CONTEXT,
                "cluster": {
                    "server": server,
                    "certificate-authority-data": node_host.file_b64(pki / "ca.crt"),
                },
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": node_host.file_b64(pki / f"{user}.crt"),
                    "client-key-data": node_host.file_b64(pki / f"{user}.key"),
                },
            }
        ],
        "contexts": [{"name": CONTEXT, "context": {"cluster": CONTEXT, "user": user}}],
        "current-context": CONTEXT,
    }
    # JSON is YAML: no YAML library needed.
    return json.dumps(doc, indent=2) + "\n"


def _start(name: str, argv: Sequence[str], logs: Path) -> int:
    log = (logs / f"{name}.log").open("ab")
    proc = subprocess.Popen(  # noqa: S603 - our own binaries, fixed arguments
        argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    with (STATE / "pids").open("a") as f:
        f.write(f"{proc.pid} {name}\n")
    return proc.pid


def _kubectl(*args: str, stdin: str | None = None, check: bool = True) -> str:
    result = subprocess.run(
        [_tool("kubectl"), "--kubeconfig", str(KUBECONFIG), *args],
        input=stdin, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if check and result.returncode != 0:
        raise ClusterError(f"kubectl {' '.join(args)}: {result.stderr.strip()}")
    return result.stdout


def _wait(what: str, probe, timeout: float = START_TIMEOUT_S) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if probe():
                return
        except SETUP_ERRORS:
            pass
        time.sleep(0.5)
    raise ClusterError(f"{what} not ready after {timeout:.0f} s (logs: {STATE / 'logs'})")


def kwok_node(
    name: str,
    *,
    gpus: int,
    cpu: str,
    memory: str,
    gpu_labels: dict[str, str] | None = None,
    gpu_taints: list[dict[str, str]] | None = None,
) -> dict:
    """A kwok node; a GPU node carries ``gpu_labels`` and ``gpu_taints`` (default: GKE's,
    :data:`GPU_LABEL` and :data:`GPU_TAINT`)."""
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "type": "kwok",
    }
    capacity = {"cpu": cpu, "memory": memory, "pods": "110", "ephemeral-storage": "100Gi"}
    spec: dict = {}
    if gpus:
        labels.update(gpu_labels if gpu_labels is not None else dict([GPU_LABEL]))
        capacity["nvidia.com/gpu"] = str(gpus)
        taints = gpu_taints if gpu_taints is not None else [GPU_TAINT]
        if taints:
            spec["taints"] = taints
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": labels,
            # kwok manages exactly the nodes carrying this annotation.
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": spec,
        # kwok's node-initialize stage fills in nodeInfo, addresses and conditions.
        "status": {"capacity": capacity, "allocatable": capacity},
    }


def _storage() -> list[dict]:
    """StorageClasses without a provisioner, each with volumes the PV controller can bind."""
    return real_node_config.storage_documents(
        STORAGE_CLASSES,
        VOLUMES_PER_CLASS,
        lambda name: {"hostPath": {"path": f"/tmp/tfd-e2e-volumes/{name}"}},
    )


def up(node: str = "kwok") -> None:
    """Start a fresh cluster (stopping a previous one first) and wait until it is usable.

    ``node`` is ``kwok`` (two simulated nodes) or ``real`` (one real node: ``tools/node.py``).
    """
    down(quiet=True)
    for bridge in node_host.reclaim_stale():
        print(f"cluster up: removed {bridge}, left by a real node that no longer runs", flush=True)
    real = node == "real"
    logs = STATE / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    pki = STATE / "pki"
    if real:
        real_node.preflight()
        _make_pki(pki, real_node.API_SANS, real_node.CERTS)
        address = real_node.NODE_IP
    else:
        _make_pki(pki)
        address = "127.0.0.1"
    etcd_port, etcd_peer, api_port, cm_port, sched_port, kwok_port = (
        node_host.free_port() for _ in range(6)
    )
    server = f"https://{address}:{api_port}"
    users = ("admin", "controller-manager", "scheduler", "kwok")
    if real:
        users += real_node.USERS
        real_node.host_up(STATE)
    for user in users:
        (STATE / f"{user}.kubeconfig").write_text(kubeconfig_text(server, pki, user))
    shutil.copy(STATE / "admin.kubeconfig", KUBECONFIG)
    KUBECONFIG.chmod(0o600)

    etcd_url = f"http://127.0.0.1:{etcd_port}"
    _start(
        "etcd",
        [
            _tool("etcd"), "--name", "tfd-e2e", "--data-dir", str(STATE / "etcd"),
            "--listen-client-urls", etcd_url, "--advertise-client-urls", etcd_url,
            "--listen-peer-urls", f"http://127.0.0.1:{etcd_peer}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{etcd_peer}",
            "--initial-cluster", f"tfd-e2e=http://127.0.0.1:{etcd_peer}",
            "--unsafe-no-fsync",
        ],
        logs,
    )  # fmt: skip
    if real:
        # The node's address: pods reach the API server there (the `kubernetes` Service's
        # endpoint, kept by the apiserver's own reconciler), and the node's kubelet is
        # authorised by the Node authorizer.
        node_flags = real_node.apiserver_flags(pki)
    else:
        # Loopback endpoints are invalid for the `kubernetes` Service: no reconciler.
        node_flags = ["--endpoint-reconciler-type=none", "--authorization-mode=RBAC"]
    _start(
        "kube-apiserver",
        [
            _tool("kube-apiserver"), f"--etcd-servers={etcd_url}",
            f"--bind-address={address}", f"--advertise-address={address}",
            f"--secure-port={api_port}",
            *node_flags,
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            f"--client-ca-file={pki / 'ca.crt'}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--enable-admission-plugins=NodeRestriction",
            "--allow-privileged=false",
            "--profiling=false",
            # Debian's etcd 3.4.23 lacks RequestWatchProgress, so this apiserver cannot serve
            # streaming lists; kwok's client-go (0.36) asks for them whatever its environment
            # says, and each refusal ended its pod, node and lease watches: its caches went
            # stale, lease renewals conflicted and a node could miss its heartbeat. With the
            # server's WatchList off, clients fall back to list+watch at once.
            "--feature-gates=WatchList=false",
        ],
        logs,
    )  # fmt: skip
    _wait("kube-apiserver", lambda: _kubectl("get", "--raw", "/readyz").strip() == "ok")
    _start(
        "kube-controller-manager",
        [
            _tool("kube-controller-manager"),
            f"--kubeconfig={STATE / 'controller-manager.kubeconfig'}",
            f"--authentication-kubeconfig={STATE / 'controller-manager.kubeconfig'}",
            f"--authorization-kubeconfig={STATE / 'controller-manager.kubeconfig'}",
            "--bind-address=127.0.0.1", f"--secure-port={cm_port}", "--leader-elect=false",
            f"--service-account-private-key-file={pki / 'sa.key'}",
            f"--root-ca-file={pki / 'ca.crt'}", "--use-service-account-credentials=true",
            f"--cluster-signing-cert-file={pki / 'ca.crt'}",
            f"--cluster-signing-key-file={pki / 'ca.key'}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            # The HPA controller syncs every 15 s by default; scaling tests wait less.
            "--horizontal-pod-autoscaler-sync-period=5s",
        ],
        logs,
    )  # fmt: skip
    _start(
        "kube-scheduler",
        [
            _tool("kube-scheduler"), f"--kubeconfig={STATE / 'scheduler.kubeconfig'}",
            f"--authentication-kubeconfig={STATE / 'scheduler.kubeconfig'}",
            f"--authorization-kubeconfig={STATE / 'scheduler.kubeconfig'}",
            "--bind-address=127.0.0.1", f"--secure-port={sched_port}", "--leader-elect=false",
        ],
        logs,
    )  # fmt: skip
    if real:
        real_node.node_up(
            STATE, pki, api_port, start=lambda n, a: _start(n, a, logs),
            kubectl=_kubectl, wait=_wait, tool=_tool,
        )  # fmt: skip
        docs = real_node.volumes(STATE, STORAGE_CLASSES, VOLUMES_PER_CLASS)
        _kubectl(
            "create",
            "-f",
            "-",
            stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}),
        )
        _wait("default service account", lambda: _kubectl("get", "sa", "default", check=False))
        print(f"cluster up (real node {real_node.NODE_NAME}): {server} (kubeconfig {KUBECONFIG})")
        return
    _start(
        "kwok",
        [
            _tool("kwok"), f"--kubeconfig={STATE / 'kwok.kubeconfig'}",
            f"--config={TOOLS / 'kwok-stages.yaml'}",
            "--manage-all-nodes=false",
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            f"--cidr={POD_CIDR}", "--node-lease-duration-seconds=40",
            # The nodes' kubelet endpoint is kwok's own server (TLS, the API server's cert), so a
            # log read gets kwok's answer ("no logs found", 400) on loopback, whatever the host's
            # network does with an address nothing here serves.
            "--node-ip=127.0.0.1", f"--node-port={kwok_port}",
            f"--server-address=127.0.0.1:{kwok_port}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
        ],
        logs,
    )  # fmt: skip
    nodes = [
        kwok_node(CPU_NODE, gpus=0, cpu="16", memory="64Gi"),
        kwok_node(GPU_NODE, gpus=8, cpu="64", memory="512Gi"),
    ]
    manifest = {"apiVersion": "v1", "kind": "List", "items": [*nodes, *_storage()]}
    _kubectl("create", "-f", "-", stdin=json.dumps(manifest))

    def nodes_ready() -> bool:
        out = _kubectl(
            "get", "nodes", "-o",
            'jsonpath={range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{" "}{end}',
        )  # fmt: skip
        return out.split() == ["True", "True"]

    _wait("kwok nodes", nodes_ready)
    # Namespaced objects need the controller-manager's service account and root CA publishers.
    _wait("default service account", lambda: bool(_kubectl("get", "sa", "default", check=False)))
    print(f"cluster up: {server} (kubeconfig {KUBECONFIG}, context {CONTEXT})")


def _pids() -> list[tuple[int, str]]:
    path = STATE / "pids"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        pid, _, name = line.partition(" ")
        out.append((int(pid), name))
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (our own child, not yet reaped) counts as gone.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def down(quiet: bool = False) -> None:
    """Stop the processes ``up`` started (in reverse order) and delete the cluster's data.

    With a real node, its pods are stopped through the kubelet first, and whatever the node
    changed on the host is put back afterwards (``tools/real_node.py``)."""
    pids = _pids()
    real = real_node.was_up(STATE)
    if real and pids and KUBECONFIG.exists():
        real_node.drain(_kubectl, quiet=quiet)
    # One at a time, last started first: the API server, for one, deregisters itself from
    # etcd on the way out, so etcd must still run then.
    for pid, name in reversed(pids):
        # Each process leads its own session: signal its whole group, nothing else.
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
        deadline = time.monotonic() + 15
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if _alive(pid):
            os.killpg(pid, signal.SIGKILL)
            if not quiet:
                print(f"{name} ({pid}) ignored SIGTERM: killed", file=sys.stderr)
    if real:
        for problem in real_node.host_down(STATE):
            print(f"cluster down: {problem}", file=sys.stderr)
    for path in ("pids", "etcd", "pki"):
        target = STATE / path
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()
    for kubeconfig in STATE.glob("*.kubeconfig"):
        kubeconfig.unlink()
    KUBECONFIG.unlink(missing_ok=True)
    if not quiet:
        print(f"cluster down: {len(pids)} processes stopped")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("up", "down"))
    parser.add_argument(
        "--node",
        choices=("kwok", "real"),
        default="kwok",
        help="kwok: two simulated nodes (default); real: one node that runs containers",
    )
    args = parser.parse_args(argv)
    try:
        up(args.node) if args.command == "up" else down()
    except SETUP_ERRORS as exc:
        print(f"cluster {args.command}: {exc}", file=sys.stderr)
        if args.command == "up":
            down(quiet=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
