"""NetworkPolicies of the training namespace: deny everything, then allow what training needs.

* ``default-deny``: every pod of the namespace, no ingress, no egress.
* ``workers-grpc``: workers reach each other on the gRPC port (both directions).
* ``dns``: every pod may query kube-dns (UDP and TCP 53) in ``kube-system``.
* ``api-server`` (autoscaling only): workers reach the API server CIDRs/ports from config to
  read their StatefulSet's replica count.
* ``https-egress`` (``egressHttpsCidrs`` only): TCP 443 to those CIDRs for datasets/buckets.
* ``metrics`` (monitoring only): ingress on the metrics port from the monitoring namespace.

Kubelet probes come from the node, which NetworkPolicy implementations allow to reach local pods.
"""

from __future__ import annotations

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


def _policy(cfg: StackConfig, suffix: str, spec: dict) -> dict:
    return {"metadata": metadata(cfg, f"{cfg.app_name}-{suffix}", "network"), "spec": spec}


def network_policy_manifests(cfg: StackConfig) -> list[dict]:
    """Every NetworkPolicy of the namespace (``metadata`` + ``spec``), deny-all first."""
    workers = {"matchLabels": selector_labels(cfg)}
    grpc = [{"protocol": "TCP", "port": cfg.workers.grpc_port}]
    policies = [
        _policy(cfg, "default-deny", {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}),
        _policy(
            cfg,
            "workers-grpc",
            {
                "podSelector": workers,
                "policyTypes": ["Ingress", "Egress"],
                "ingress": [{"from": [{"podSelector": workers}], "ports": grpc}],
                "egress": [{"to": [{"podSelector": workers}], "ports": grpc}],
            },
        ),
        _policy(
            cfg,
            "dns",
            {
                "podSelector": {},
                "policyTypes": ["Egress"],
                "egress": [
                    {
                        "to": [
                            {
                                "namespaceSelector": {
                                    "matchLabels": {NAMESPACE_NAME_LABEL: DNS_NAMESPACE}
                                },
                                "podSelector": {"matchLabels": dict(DNS_POD_LABELS)},
                            }
                        ],
                        "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
                    }
                ],
            },
        ),
    ]
    if cfg.autoscaling.enabled:
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
                            "to": [
                                {"ipBlock": {"cidr": c}} for c in cfg.cluster.egress_https_cidrs
                            ],
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
