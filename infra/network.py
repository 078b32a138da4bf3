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
  neighbours, the nodes' metadata server or the other tenants' pods. It and
  ``metadata-egress`` (a gs:// location's token) select the stack's pods
  (:func:`stack_selector`): the workers and the run reader ``tfd runs`` makes from their
  template when none runs, which reads the same bucket with the same credentials.
* ``metrics`` (monitoring only): ingress on the metrics port from the monitoring namespace.

Kubelet probes come from the node, which NetworkPolicy implementations allow to reach local pods.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from infra.component import Component
from infra.config import ClusterConfig, StackConfig
from infra.labels import Identity, metadata, selector, selector_labels

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


@dataclass(frozen=True)
class NetworkPoliciesArgs:
    """Inputs of :class:`NetworkPolicies`.

    Attributes:
        identity: labels and namespace of the policies and of the pods they select.
        cluster: the API server, DNS and HTTPS egress ranges.
        grpc_port, metrics_port: the workers' ports.
        nccl: the workers' collective may run on NCCL (:func:`uses_nccl`).
        whole_namespace: the stack owns the namespace, so the namespace-wide policies select
            every pod of it (:func:`scope_selector`).
        monitoring_namespace: where Prometheus scrapes from; ``None`` without monitoring.
        metadata_egress: ``(CIDR, port)`` of the metadata server the workers get their
            object-store token from: the stack's ``metadataEgress`` with a ``gs://``
            checkpoint location, else none.
    """

    identity: Identity
    cluster: ClusterConfig
    grpc_port: int
    metrics_port: int
    nccl: bool
    whole_namespace: bool
    monitoring_namespace: str | None
    metadata_egress: tuple[tuple[str, int], ...] = ()

    @classmethod
    def from_config(cls, cfg: StackConfig) -> NetworkPoliciesArgs:
        return cls(
            identity=Identity.of(cfg),
            cluster=cfg.cluster,
            grpc_port=cfg.workers.grpc_port,
            metrics_port=cfg.workers.metrics_port,
            nccl=uses_nccl(cfg),
            whole_namespace=cfg.owns_namespace,
            monitoring_namespace=cfg.monitoring.namespace if cfg.monitoring.enabled else None,
            metadata_egress=(
                cfg.cluster.metadata_egress if (cfg.storage.uri or "").startswith("gs://") else ()
            ),
        )


@dataclass(frozen=True)
class Policy:
    """One NetworkPolicy: its name and ``spec``."""

    name: str
    spec: k8s.networking.v1.NetworkPolicySpecArgs


def _policy(args: NetworkPoliciesArgs, suffix: str, **spec) -> Policy:
    return Policy(
        f"{args.identity.app_name}-{suffix}", k8s.networking.v1.NetworkPolicySpecArgs(**spec)
    )


def _egress(
    args: NetworkPoliciesArgs,
    suffix: str,
    pods: k8s.meta.v1.LabelSelectorArgs,
    *rules: k8s.networking.v1.NetworkPolicyEgressRuleArgs,
) -> Policy:
    """An egress-only policy of the ``pods`` with ``rules``."""
    return _policy(args, suffix, pod_selector=pods, policy_types=["Egress"], egress=list(rules))


def _ports(protocol: str, *numbers: int) -> list[k8s.networking.v1.NetworkPolicyPortArgs]:
    return [k8s.networking.v1.NetworkPolicyPortArgs(protocol=protocol, port=n) for n in numbers]


def _ip_block(cidr: str) -> k8s.networking.v1.NetworkPolicyPeerArgs:
    return k8s.networking.v1.NetworkPolicyPeerArgs(
        ip_block=k8s.networking.v1.IPBlockArgs(cidr=cidr)
    )


def _namespace(name: str) -> k8s.meta.v1.LabelSelectorArgs:
    return k8s.meta.v1.LabelSelectorArgs(match_labels={NAMESPACE_NAME_LABEL: name})


def scope_selector(args: NetworkPoliciesArgs) -> k8s.meta.v1.LabelSelectorArgs:
    """The pods the namespace-wide policies (default deny, DNS) select: every pod of a namespace
    the stack owns, else only this stack's (its ``app.kubernetes.io/name`` and ``instance``)."""
    if args.whole_namespace:
        return k8s.meta.v1.LabelSelectorArgs()
    return stack_selector(args)


def stack_selector(args: NetworkPoliciesArgs) -> k8s.meta.v1.LabelSelectorArgs:
    """This stack's pods, by :data:`STACK_POD_LABELS`: its workers, and the run reader that
    ``tfd runs`` makes from their pod template (another component label, the same others)."""
    labels = selector_labels(args.identity)
    return k8s.meta.v1.LabelSelectorArgs(match_labels={k: labels[k] for k in STACK_POD_LABELS})


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


def https_peer(cidr: str) -> k8s.networking.v1.NetworkPolicyPeerArgs:
    """One ``to`` entry of ``https-egress``: the CIDR minus :func:`excepted_ranges`."""
    return k8s.networking.v1.NetworkPolicyPeerArgs(
        ip_block=k8s.networking.v1.IPBlockArgs(cidr=cidr, except_=excepted_ranges(cidr) or None)
    )


def uses_nccl(cfg: StackConfig) -> bool:
    """The collective may run on NCCL: GPU workers with ``collective`` ``nccl`` or ``auto``."""
    return cfg.workers.gpus > 0 and cfg.training.collective != "ring"


def peer_policy(args: NetworkPoliciesArgs) -> Policy:
    """Worker-to-worker traffic, both directions, between worker pods only.

    The gRPC port alone without NCCL. With NCCL every TCP port (a port entry without ``port``
    matches all ports of its protocol): NCCL bootstraps and moves tensors between hosts over
    sockets on ephemeral ports (``NCCL_SOCKET_IFNAME`` picks the interface, not the port).
    """
    if args.nccl:
        suffix, ports = "workers-nccl", [k8s.networking.v1.NetworkPolicyPortArgs(protocol="TCP")]
    else:
        suffix, ports = "workers-grpc", _ports("TCP", args.grpc_port)
    workers = [k8s.networking.v1.NetworkPolicyPeerArgs(pod_selector=selector(args.identity))]
    return _policy(
        args,
        suffix,
        pod_selector=selector(args.identity),
        policy_types=["Ingress", "Egress"],
        ingress=[k8s.networking.v1.NetworkPolicyIngressRuleArgs(from_=workers, ports=ports)],
        egress=[k8s.networking.v1.NetworkPolicyEgressRuleArgs(to=workers, ports=ports)],
    )


def network_policies(args: NetworkPoliciesArgs) -> list[Policy]:
    """Every NetworkPolicy of the namespace, deny-all first."""
    dns_peers = [
        k8s.networking.v1.NetworkPolicyPeerArgs(
            namespace_selector=_namespace(DNS_NAMESPACE),
            pod_selector=k8s.meta.v1.LabelSelectorArgs(match_labels=dict(DNS_POD_LABELS)),
        ),
        # Resolvers outside kube-dns: NodeLocal DNSCache, GKE's Cloud DNS.
        *(_ip_block(c) for c in args.cluster.dns_egress_cidrs),
    ]
    policies = [
        _policy(
            args,
            "default-deny",
            pod_selector=scope_selector(args),
            policy_types=["Ingress", "Egress"],
        ),
        peer_policy(args),
        _policy(
            args,
            "dns",
            pod_selector=scope_selector(args),
            policy_types=["Egress"],
            egress=[
                k8s.networking.v1.NetworkPolicyEgressRuleArgs(
                    to=dns_peers, ports=[*_ports("UDP", 53), *_ports("TCP", 53)]
                )
            ],
        ),
        _egress(
            args,
            "api-server",
            selector(args.identity),
            k8s.networking.v1.NetworkPolicyEgressRuleArgs(
                to=[_ip_block(c) for c in args.cluster.api_server_cidrs],
                ports=_ports("TCP", *args.cluster.api_server_ports),
            ),
        ),
    ]
    if args.cluster.egress_https_cidrs:
        policies.append(
            _egress(
                args,
                "https-egress",
                stack_selector(args),
                k8s.networking.v1.NetworkPolicyEgressRuleArgs(
                    to=[https_peer(c) for c in args.cluster.egress_https_cidrs],
                    ports=_ports("TCP", 443),
                ),
            )
        )
    if args.metadata_egress:
        # A gs:// checkpoint location's token (GKE Workload Identity): the metadata server is
        # link-local, which the HTTPS rule excepts, and answers on its own port.
        rules = (
            k8s.networking.v1.NetworkPolicyEgressRuleArgs(
                to=[_ip_block(block)], ports=_ports("TCP", port)
            )
            for block, port in args.metadata_egress
        )
        policies.append(_egress(args, "metadata-egress", stack_selector(args), *rules))
    if args.monitoring_namespace is not None:
        policies.append(
            _policy(
                args,
                "metrics",
                pod_selector=selector(args.identity),
                policy_types=["Ingress"],
                ingress=[
                    k8s.networking.v1.NetworkPolicyIngressRuleArgs(
                        from_=[
                            k8s.networking.v1.NetworkPolicyPeerArgs(
                                namespace_selector=_namespace(args.monitoring_namespace)
                            )
                        ],
                        ports=_ports("TCP", args.metrics_port),
                    )
                ],
            )
        )
    return policies


class NetworkPolicies(Component):
    """All NetworkPolicies of :func:`network_policies`."""

    def __init__(
        self, name: str, args: NetworkPoliciesArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(COMPONENT_TYPE, name, opts)
        names = []
        for policy in network_policies(args):
            k8s.networking.v1.NetworkPolicy(
                policy.name,
                metadata=metadata(args.identity, policy.name, "network"),
                spec=policy.spec,
                opts=self.child_opts(),
            )
            names.append(policy.name)
        self.register_outputs({"policies": names})
