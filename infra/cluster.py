"""Cluster selection: one explicit ``k8s.Provider`` that every resource uses.

Default providers are disabled in every stack file (``pulumi:disable-default-providers``, checked
by :mod:`infra.config`), so a resource that forgot this provider fails instead of landing on
whatever cluster the shell's kubeconfig points at.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from infra.config import ClusterConfig


def provider_args(cluster: ClusterConfig) -> dict[str, Any]:
    """Keyword arguments of the provider: kube context and/or the secret kubeconfig.

    Neither set (only possible for ``minikube`` with an explicit empty context) leaves the
    provider on ``KUBECONFIG``'s current context, which :mod:`infra.config` prevents by
    defaulting the context to ``minikube``.
    """
    args: dict[str, Any] = {}
    if cluster.context is not None:
        args["context"] = cluster.context
    if cluster.kubeconfig is not None:
        args["kubeconfig"] = pulumi.Output.secret(cluster.kubeconfig)
    return args


def make_provider(name: str, cluster: ClusterConfig) -> k8s.Provider:
    """The one Kubernetes provider of the stack."""
    return k8s.Provider(name, **provider_args(cluster))
