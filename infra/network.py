"""NetworkPolicies of the training namespace: deny everything, then allow what training needs.

* ``default-deny``: every pod of the namespace, no ingress, no egress. In a namespace the
  stack does not own (``namespaceMode: existing``) this and the ``dns`` policy select the
  stack's own pods only (:func:`scope_selector`): a policy that selects a pod isolates it, so
  ``podSelector: {}`` would cut every other workload of that namespace off the network.
* ``workers-grpc``: workers reach each other on the gRPC port (both directions). On GPU
  stacks whose collective may be NCCL (``nccl``, or ``auto``, which picks NCCL on GPUs) it is
  ``workers-nccl`` instead: worker-to-worker TCP on every port, because NCCL's bootstrap and
  socket transport listen on ephemeral ports that no policy can name in advance. Still only
  between worker pods, both directions.
* ``dns``: every pod may query kube-dns (UDP and TCP 53) in ``kube-system``, and the resolvers
  of ``dnsEgressCidrs`` (NodeLocal DNSCache, GKE's metadata-server DNS).
* ``api-server``: workers reach the API server CIDRs/ports from config for their own
  StatefulSet (``contract.API_CALLS``: replica count, rollouts, scale to zero when done).
* ``https-egress`` (``egressHttpsCidrs`` only): TCP 443 to those CIDRs for datasets/buckets,
  each with the in-cluster, private and metadata ranges inside it excepted
  (:func:`excepted_ranges`): ``0.0.0.0/0`` means "the internet", not the API server's
  neighbours, the nodes' metadata server or the other tenants' pods.
* ``metrics`` (monitoring only): ingress on the metrics port from the monitoring namespace.

Kubelet probes come from the node, which NetworkPolicy implementations allow to reach local pods.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as kubernetes

from infra.component import Component
from infra.config import StackConfig
from infra.labels import kwargs, metadata, selector_labels

COMPONENT_TYPE = "tfd:infra:NetworkPolicies"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
"""Label the API server sets on every namespace (immutable, equals the name)."""
DNS_NAMESPACE = "kube-system"
DNS_POD_LABELS = {"k8s-app": "kube-dns"}
EXCEPTED_RANGES: dict[str, str] = {
    "169.254.0.0/16": "link-local: cloud metadata servers (169.254.169.254) and node-local "
    "services",
    "10.0.0.0/8": "RFC 1918 private: pods, services, nodes, VPC peers",
    "172.16.0.0/12": "RFC 1918 private",
    "192.168.0.0/16": "RFC 1918 private",
    "100.64.0.0/10": "RFC 6598 shared address space: pod ranges of EKS/GKE custom networking",
    "fe80::/10": "IPv6 link-local",
    "fc00::/7": "IPv6 unique local: private ranges, AWS's metadata server fd00:ec2::254",
}
"""Ranges cut out of every ``egressHttpsCidrs`` entry that contains them, with why. An entry
that is (or lies inside) one of them is allowed as written: listing ``10.20.0.0/16`` for an
internal mirror says that range is wanted."""
STACK_POD_LABELS = ("app.kubernetes.io/name", "app.kubernetes.io/instance")
"""The labels every pod of this stack (and no other stack's) carries: see ``infra.labels``."""


def _policy(cfg: StackConfig, suffix: str, spec: dict) -> dict:
    return {"metadata": metadata(cfg, f"{cfg.app_name}-{suffix}", "network"), "spec": spec}


def scope_selector(cfg: StackConfig) -> dict:
    """The pods the namespace-wide policies (default deny, DNS) select: every pod of a namespace
    the stack owns, else only this stack's (its ``app.kubernetes.io/name`` and ``instance``)."""
    if cfg.owns_namespace:
        return {}
    labels = selector_labels(cfg)
    return {"matchLabels": {k: labels[k] for k in STACK_POD_LABELS}}


def excepted_ranges(cidr: str) -> list[str]:
    """The :data:`EXCEPTED_RANGES` strictly inside ``cidr`` (same IP version), for its
    ``ipBlock.except``."""
    network = ipaddress.ip_network(cidr)
    out = []
    for text in EXCEPTED_RANGES:
        excepted = ipaddress.ip_network(text)
        if (
            excepted.version == network.version
            and excepted != network
            and excepted.subnet_of(network)  # type: ignore[arg-type]
        ):
            out.append(text)
    return out


def https_peer(cidr: str) -> dict:
    """One ``to`` entry of ``https-egress``: the CIDR minus :func:`excepted_ranges`."""
    block: dict = {"cidr": cidr}
    excepted = excepted_ranges(cidr)
    if excepted:
        block["except"] = excepted
    return {"ipBlock": block}


def uses_nccl(cfg: StackConfig) -> bool:
    """The collective may run on NCCL: GPU workers with ``collective`` ``nccl`` or ``auto``."""
    return cfg.workers.gpus > 0 and cfg.training.collective != "ring"


def peer_policy(cfg: StackConfig) -> dict:
    """Worker-to-worker traffic, both directions, between worker pods only.

    The gRPC port alone without NCCL. With NCCL every TCP port (a port entry without ``port``
    matches all ports of its protocol): NCCL bootstraps and moves tensors between hosts over
    sockets on ephemeral ports (``NCCL_SOCKET_IFNAME`` picks the interface, not the port).
    """
    workers = {"matchLabels": selector_labels(cfg)}
    if uses_nccl(cfg):
        suffix, ports = "workers-nccl", [{"protocol": "TCP"}]
    else:
        suffix, ports = "workers-grpc", [{"protocol": "TCP", "port": cfg.workers.grpc_port}]
    return _policy(
        cfg,
        suffix,
        {
            "podSelector": workers,
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [{"podSelector": workers}], "ports": ports}],
            "egress": [{"to": [{"podSelector": workers}], "ports": ports}],
        },
    )


def network_policy_manifests(cfg: StackConfig) -> list[dict]:
    """Every NetworkPolicy of the namespace (``metadata`` + ``spec``), deny-all first."""
    workers = {"matchLabels": selector_labels(cfg)}
    policies = [
        _policy(
            cfg,
            "default-deny",
            {"podSelector": scope_selector(cfg), "policyTypes": ["Ingress", "Egress"]},
        ),
        peer_policy(cfg),
        _policy(
            cfg,
            "dns",
            {
                "podSelector": scope_selector(cfg),
                "policyTypes": ["Egress"],
                "egress": [
                    {
                        "to": [
                            {
                                "namespaceSelector": {
                                    "matchLabels": {NAMESPACE_NAME_LABEL: DNS_NAMESPACE}
                                },
                                "podSelector": {"matchLabels": dict(DNS_POD_LABELS)},
                            },
                            # Resolvers outside kube-dns: NodeLocal DNSCache, GKE's Cloud DNS.
                            *({"ipBlock": {"cidr": c}} for c in cfg.cluster.dns_egress_cidrs),
                        ],
                        "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
                    }
                ],
            },
        ),
    ]
    policies.append(
        _policy(
            cfg,
            "api-server",
            {
                "podSelector": workers,
                "policyTypes": ["Egress"],
                "egress": [
                    {
                        "to": [{"ipBlock": {"cidr": c}} for c in cfg.cluster.api_server_cidrs],
                        "ports": [
                            {"protocol": "TCP", "port": p} for p in cfg.cluster.api_server_ports
                        ],
                    }
                ],
            },
        )
    )
    if cfg.cluster.egress_https_cidrs:
        policies.append(
            _policy(
                cfg,
                "https-egress",
                {
                    "podSelector": workers,
                    "policyTypes": ["Egress"],
                    "egress": [
                        {
                            "to": [https_peer(c) for c in cfg.cluster.egress_https_cidrs],
                            "ports": [{"protocol": "TCP", "port": 443}],
                        }
                    ],
                },
            )
        )
    if cfg.monitoring.enabled:
        policies.append(
            _policy(
                cfg,
                "metrics",
                {
                    "podSelector": workers,
                    "policyTypes": ["Ingress"],
                    "ingress": [
                        {
                            "from": [
                                {
                                    "namespaceSelector": {
                                        "matchLabels": {
                                            NAMESPACE_NAME_LABEL: cfg.monitoring.namespace
                                        }
                                    }
                                }
                            ],
                            "ports": [{"protocol": "TCP", "port": cfg.workers.metrics_port}],
                        }
                    ],
                },
            )
        )
    return policies


@dataclass(frozen=True)
class NetworkPoliciesArgs:
    cfg: StackConfig


class NetworkPolicies(Component):
    """All NetworkPolicies of :func:`network_policy_manifests`."""

    def __init__(
        self, name: str, args: NetworkPoliciesArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(COMPONENT_TYPE, name, opts)
        names = []
        for manifest in network_policy_manifests(args.cfg):
            policy_name = manifest["metadata"]["name"]
            kubernetes.networking.v1.NetworkPolicy(
                policy_name, **kwargs(manifest), opts=self.child_opts()
            )
            names.append(policy_name)
        self.register_outputs({"policies": names})
