"""The real node's rendered configuration (``tools/real_node_config.py``): names, kubelet,
containerd, CNI, CoreDNS, the metrics API and storage; and which iptables rules ``down`` removes
(``tools/node_host.py``). Nothing is started here."""

from __future__ import annotations

import ipaddress
import tomllib
from pathlib import Path

import pytest

from infra.config import parse_config
from tools import cluster, object_store, real_node_config
from tools.node_host import rules_into
from tools.real_node_config import DNS_IP, NODE_IP, NODE_NAME, Names, Ports
from tools.render import stack_config

STATE = Path("/work/x/.tools/cluster")
PKI = STATE / "pki"
PORTS = Ports(
    api=6443, kubelet=10250, kubelet_healthz=10248, proxy_metrics=10249, proxy_healthz=10256,
    metrics_server=4443,
)  # fmt: skip


@pytest.mark.parametrize("root", ["/work/main", "/work/wt-node", "/a/very/long/checkout/path"])
def test_names_fit_linux_limits_and_carry_tfd(root: str) -> None:
    names = Names.for_root(Path(root))
    assert names.bridge.startswith("tfd") and len(names.bridge) <= 15, f"{root}: {names.bridge}"
    assert names.cgroup.startswith("tfd-"), names.cgroup


def test_checkouts_get_different_names() -> None:
    a, b = Names.for_root(Path("/work/main")), Names.for_root(Path("/work/wt-node"))
    assert {a.bridge, a.cgroup}.isdisjoint({b.bridge, b.cgroup})


def test_kubelet_runs_on_cgroup_v1_with_cluster_dns_and_its_own_cgroup_root() -> None:
    names = Names.for_root(Path("/work/x"))
    cfg = real_node_config.kubelet_config(names, PORTS, STATE, PKI)
    cases = {
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": f"/{names.cgroup}",
        "clusterDNS": [DNS_IP],
        "address": NODE_IP,
        "port": PORTS.kubelet,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "authorization": {"mode": "Webhook"},
        # Imported images cannot be pulled again: the kubelet must never garbage-collect them.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
    }
    for key, want in cases.items():
        assert cfg[key] == want, f"kubelet {key}: {cfg[key]!r}, want {want!r}"
    assert cfg["authentication"]["anonymous"]["enabled"] is False
    assert cfg["containerRuntimeEndpoint"].endswith("/containerd/containerd.sock")


def test_containerd_config_keeps_all_but_its_images_under_the_state_dir() -> None:
    cache = Path("/root/.cache/tf-distributed/containerd")
    doc = tomllib.loads(real_node_config.containerd_config(STATE, cache))
    assert doc["version"] == 2
    assert doc["root"] == str(cache), "images and snapshots are kept between clusters"
    for path in (doc["state"], doc["grpc"]["address"]):
        assert path.startswith(str(STATE)), path
    cri = doc["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["sandbox_image"] == "tfd.local/pause:1"
    assert cri["netns_mounts_under_state_dir"] is True, "netns must not land in /run/netns"
    runc = cri["containerd"]["runtimes"]["runc"]
    assert runc["options"]["Root"].startswith(str(STATE))
    assert runc["options"]["SystemdCgroup"] is False
    assert cri["cni"]["conf_dir"].startswith(str(STATE))
    # Registry hosts are read per pull from the node's state: a registry can join later.
    assert cri["registry"]["config_path"] == str(real_node_config.registry_hosts_dir(STATE))
    assert cri["registry"]["config_path"].startswith(str(STATE))


def test_cni_bridge_is_the_nodes_own_and_its_subnet_holds_the_gateway() -> None:
    names = Names.for_root(Path("/work/x"))
    [plugin] = real_node_config.cni_config(names, STATE)["plugins"]
    assert plugin["bridge"] == names.bridge
    [[rng]] = plugin["ipam"]["ranges"]
    assert ipaddress.ip_address(rng["gateway"]) in ipaddress.ip_network(rng["subnet"])
    assert plugin["ipam"]["dataDir"].startswith(str(STATE)), "IPAM state outside the cluster dir"


def test_coredns_binds_only_the_nodelocal_address_and_serves_the_cluster_domain() -> None:
    text = real_node_config.corefile(STATE / "coredns.kubeconfig", "tfd-e2e")
    assert f"bind {DNS_IP}\n" in text
    assert "kubernetes cluster.local in-addr.arpa ip6.arpa" in text
    assert f"kubeconfig {STATE / 'coredns.kubeconfig'} tfd-e2e" in text
    assert "forward" not in text, "no upstream resolver can be reached here"


def test_coredns_maps_googles_names_to_the_object_store_stand_ins_addresses() -> None:
    text = real_node_config.corefile(STATE / "coredns.kubeconfig", "tfd-e2e")
    hosts = text.split("hosts {")[1].split("}")[0].split("\n")
    entries = {line.split()[0]: line.split()[1:] for line in hosts if line.strip()}
    assert entries[real_node_config.GOOGLE_APIS_IP] == list(object_store.API_HOSTS), text
    assert entries[real_node_config.METADATA_IP] == [object_store.METADATA_HOST], text
    assert entries["fallthrough"] == [], "cluster names must reach the kubernetes plugin"


@pytest.mark.parametrize("stack", ["dev", "e2e"])
def test_stack_dns_policy_default_allows_the_nodes_dns_address(stack: str) -> None:
    cfg = parse_config(*stack_config(stack), {})
    assert any(
        ipaddress.ip_address(DNS_IP) in ipaddress.ip_network(c)
        for c in cfg.cluster.dns_egress_cidrs
    ), f"stack {stack}: dnsEgressCidrs {cfg.cluster.dns_egress_cidrs} miss {DNS_IP}"


def test_metrics_api_routes_to_metrics_server_on_the_node() -> None:
    docs = {d["kind"]: d for d in real_node_config.metrics_api(PORTS, "Q0E=")}
    assert docs["APIService"]["spec"]["service"] == {
        "name": "metrics-server",
        "namespace": "kube-system",
        "port": 443,
    }
    [subset] = docs["Endpoints"]["subsets"]
    assert subset["addresses"] == [{"ip": NODE_IP}]
    assert subset["ports"][0]["port"] == PORTS.metrics_server
    assert "selector" not in docs["Service"]["spec"], "selectorless: its endpoints are ours"


def test_storage_volumes_are_local_to_the_node_and_readwritemany() -> None:
    docs = real_node_config.storage(STATE, cluster.STORAGE_CLASSES, 2)
    pvs = [d for d in docs if d["kind"] == "PersistentVolume"]
    assert len(pvs) == 2 * len(cluster.STORAGE_CLASSES)
    for pv in pvs:
        spec = pv["spec"]
        assert spec["local"]["path"].startswith(str(STATE / "volumes")), pv["metadata"]["name"]
        assert "ReadWriteMany" in spec["accessModes"]
        [term] = spec["nodeAffinity"]["required"]["nodeSelectorTerms"]
        assert term["matchExpressions"][0]["values"] == [NODE_NAME]


RULES = """-P INPUT ACCEPT
-N KUBE-FIREWALL
-N KUBE-KUBELET-CANARY
-A INPUT -j KUBE-FIREWALL
-A OUTPUT -m comment --comment "kube firewall" -j KUBE-FIREWALL
-A FORWARD -s 10.0.0.0/8 -j ACCEPT
-A FORWARD -m comment --comment "mentions KUBE-FIREWALL only in a comment" -j ACCEPT
-A KUBE-FIREWALL -d 127.0.0.0/8 -j DROP
-A INPUT -g KUBE-KUBELET-CANARY
"""


@pytest.mark.parametrize(
    ("chains", "want"),
    [
        (
            {"KUBE-FIREWALL"},
            [
                ["INPUT", "-j", "KUBE-FIREWALL"],
                ["OUTPUT", "-m", "comment", "--comment", "kube firewall", "-j", "KUBE-FIREWALL"],
            ],
        ),
        ({"KUBE-KUBELET-CANARY"}, [["INPUT", "-g", "KUBE-KUBELET-CANARY"]]),
        ({"KUBE-NOTHING"}, []),
    ],
)
def test_rules_into_added_chains_are_found_for_deletion(chains: set[str], want: list) -> None:
    assert rules_into(RULES, chains) == want


def test_node_and_control_plane_agree_on_the_service_range() -> None:
    assert real_node_config.SERVICE_CIDR == cluster.SERVICE_CIDR
    first = next(ipaddress.ip_network(cluster.SERVICE_CIDR).hosts())
    assert str(first) == "10.96.0.1", "the `kubernetes` Service's address the tests expect"
