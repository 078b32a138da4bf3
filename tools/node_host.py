"""The host side of the real node: interfaces, cgroups, mounts, netfilter and the kernel
tunables the kubelet sets; what ``up`` adds here, ``down`` removes or puts back."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shlex
import signal
import socket
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from tools.real_node_config import BRIDGE_PREFIX, DNS_IP, NODE_IP, POD_GATEWAY, Names

# The kernel tunables the kubelet sets when protectKernelDefaults is off (pkg/kubelet/cm).
KERNEL_TUNABLES = (
    "vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
)  # fmt: skip
IPTABLES = ("iptables", "ip6tables")
IPTABLES_TABLES = ("filter", "nat", "mangle")
NFT_TABLES = (("ip", "kube-proxy"), ("ip6", "kube-proxy"))


class NodeError(RuntimeError):
    """The real node could not start or stop; the message says which part and why."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the kernel picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def file_b64(path: Path) -> str:
    """A file's bytes in base64 (a kubeconfig's or an APIService's ``*-data`` fields)."""
    return base64.b64encode(path.read_bytes()).decode()


def run(*argv: str, check: bool = True, stdin: bytes | None = None) -> str:
    result = subprocess.run(list(argv), input=stdin, capture_output=True, check=False)
    if check and result.returncode != 0:
        raise NodeError(f"{' '.join(argv[:4])}: {result.stderr.decode().strip()[-400:]}")
    return result.stdout.decode()


def iptables_chains() -> dict[str, list[str]]:
    """The chain names of each iptables and ip6tables table (``ip6tables:nat`` etc.), to remove
    only the chains the node added (the kubelet's canaries and KUBE-FIREWALL)."""
    out = {}
    for cmd in IPTABLES:
        for table in IPTABLES_TABLES:
            text = run(f"{cmd}-save", "-t", table, check=False)
            chains = sorted(line[1:].split()[0] for line in text.splitlines() if line[:1] == ":")
            out[f"{cmd}:{table}"] = chains
    return out


def read_tunables() -> dict[str, str]:
    return {t: Path("/proc/sys", t).read_text().strip() for t in KERNEL_TUNABLES}


def ipsets() -> list[str]:
    return sorted(run("ipset", "list", "-n", check=False).split())


@dataclass(frozen=True)
class HostBefore:
    """What the host looked like before ``up``: ``down`` restores it."""

    tunables: dict[str, str]
    chains: dict[str, list[str]]
    sets: list[str]


def cgroup_hierarchies() -> list[Path]:
    """The cgroup v1 hierarchies (the kubelet's cgroupfs driver writes to each)."""
    base = Path("/sys/fs/cgroup")
    return sorted(p for p in base.iterdir() if p.is_dir() and p.name != "unified")


def make_cgroups(names: Names) -> None:
    for h in cgroup_hierarchies():
        d = h / names.cgroup
        d.mkdir(exist_ok=True)
        if h.name == "cpuset":  # a new cpuset has no CPUs or memory nodes until given some
            for f in ("cpuset.cpus", "cpuset.mems"):
                (d / f).write_text((h / f).read_text())


def cgroup_pids(names: Names) -> set[int]:
    pids: set[int] = set()
    for h in cgroup_hierarchies():
        for procs in (h / names.cgroup).rglob("cgroup.procs"):
            try:
                pids.update(int(p) for p in procs.read_text().split())
            except OSError:
                continue
    return pids


def remove_cgroups(names: Names) -> list[str]:
    """Every cgroup under the node's root, in each v1 hierarchy and in the cgroup2 mount that
    runc also writes to on this hybrid layout; the directories that could not be removed."""
    left = []
    for h in [*cgroup_hierarchies(), Path("/sys/fs/cgroup/unified")]:
        root = h / names.cgroup
        if not root.exists():
            continue
        for d in sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
            try:
                d.rmdir()
            except OSError:
                left.append(str(d))
        try:
            root.rmdir()
        except OSError:
            left.append(str(root))
    return left


def mounts_under(path: Path) -> list[str]:
    """Mount points at or below ``path`` (deepest first)."""
    out = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        point = line.split()[1].replace("\\040", " ")
        if point == str(path) or point.startswith(f"{path}/"):
            out.append(point)
    return sorted(out, key=lambda p: -p.count("/"))


def node_alive(names: Names) -> bool:
    """Whether the real node with these names still runs: a process in its cgroups (its pods),
    or its bridge holding the node's address while a process names that address (the API
    server binds it first, the kubelet, kube-proxy and metrics-server after). Nothing of it
    survives a machine restart."""
    if cgroup_pids(names):
        return True
    if f" {NODE_IP}/" not in run("ip", "-o", "addr", "show", "dev", names.bridge, check=False):
        return False
    address = NODE_IP.encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if address in cmd:
            return True
    return False


def reclaim(names: Names) -> bool:
    """Remove the bridge and cgroups of the node with these names unless it is alive; whether
    it is gone now."""
    if node_alive(names):
        return False
    if left := remove_cgroups(names):
        raise NodeError(f"a stale node's cgroups could not be removed: {left}")
    run("ip", "link", "del", names.bridge)
    return True


def reclaim_stale() -> list[str]:
    """Remove the bridge and cgroups of every real node (of any checkout) whose processes are
    gone: a killed session or a restarted machine leaves them, and their addresses would keep
    every later node from starting. The bridges removed; a live node's are kept."""
    removed = []
    for dev in sorted(Path("/sys/class/net").glob(f"{BRIDGE_PREFIX}*")):
        names = Names.for_tag(dev.name.removeprefix(BRIDGE_PREFIX))
        if reclaim(names):
            removed.append(dev.name)
    return removed


def network_up(names: Names) -> None:
    """The node's one bridge: the pods' gateway, the node's (and API server's) address and the
    NodeLocal DNS address. (This kernel has no dummy interfaces; a bridge serves as well.)"""
    if Path(f"/sys/class/net/{names.bridge}").exists():
        raise NodeError(f"interface {names.bridge} exists: run `make cluster-down` first")
    taken = run("ip", "-o", "addr", "show")
    for ip in (NODE_IP, DNS_IP, POD_GATEWAY):
        if f" {ip}/" in taken:
            raise NodeError(f"address {ip} already on this machine: another real node runs here")
    run("ip", "link", "add", names.bridge, "type", "bridge")
    run("ip", "addr", "add", f"{POD_GATEWAY}/24", "dev", names.bridge)
    run("ip", "addr", "add", f"{NODE_IP}/32", "dev", names.bridge)
    run("ip", "addr", "add", f"{DNS_IP}/32", "dev", names.bridge)
    run("ip", "link", "set", names.bridge, "up")


def network_down(names: Names) -> None:
    if Path(f"/sys/class/net/{names.bridge}").exists():
        run("ip", "link", "del", names.bridge, check=False)
    for family, table in NFT_TABLES:
        if run("nft", "list", "table", family, table, check=False):
            run("nft", "delete", "table", family, table, check=False)


def rules_into(listing: str, chains: set[str]) -> list[list[str]]:
    """Rules (``iptables -S`` lines, without ``-A``) of other chains that jump or go to one of
    ``chains``: they must go before those chains can be removed."""
    out = []
    for line in listing.splitlines():
        words = shlex.split(line)
        if words[:1] != ["-A"] or words[1] in chains:
            continue
        targets = {words[i + 1] for i, w in enumerate(words[:-1]) if w in ("-j", "-g")}
        if targets & chains:
            out.append(words[1:])
    return out


def restore_host(before: HostBefore) -> None:
    for tunable, value in before.tunables.items():
        with contextlib.suppress(OSError):
            Path("/proc/sys", tunable).write_text(value)
    for key, chains in iptables_chains().items():
        cmd, table = key.split(":")
        # Only KUBE-* chains: the host's own chains are never flushed or removed.
        added = {c for c in chains if c.startswith("KUBE-")} - set(before.chains.get(key, []))
        if not added:
            continue
        # First the rules of the host's chains that jump to an added chain, then those chains.
        for rule in rules_into(run(cmd, "-t", table, "-S", check=False), added):
            run(cmd, "-t", table, "-D", *rule, check=False)
        for chain in sorted(added):
            run(cmd, "-t", table, "-F", chain, check=False)
        for chain in sorted(added):
            run(cmd, "-t", table, "-X", chain, check=False)
    # The policy enforcer's ipsets, once no rule refers to them.
    for name in sorted(set(ipsets()) - set(before.sets)):
        run("ipset", "destroy", name, check=False)


def save_before(path: Path) -> HostBefore:
    before = HostBefore(tunables=read_tunables(), chains=iptables_chains(), sets=ipsets())
    path.write_text(json.dumps(asdict(before)))
    return before


def load_before(path: Path) -> HostBefore | None:
    if not path.exists():
        return None
    return HostBefore(**json.loads(path.read_text()))


def kill_pids(pids: set[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue


def shim_pids(socket: Path) -> set[int]:
    """containerd shims started for our containerd (their command line names its socket)."""
    out = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if cmd and cmd[0].endswith(b"containerd-shim-runc-v2") and str(socket).encode() in cmd:
            out.add(int(proc.name))
    return out


def wait_gone(pids: set[int], timeout: float) -> set[int]:
    deadline = time.monotonic() + timeout
    alive = set(pids)
    while alive and time.monotonic() < deadline:
        alive = {p for p in alive if Path(f"/proc/{p}").exists()}
        time.sleep(0.2)
    return alive
