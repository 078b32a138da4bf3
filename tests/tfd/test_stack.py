"""How tfd reaches the stack's cluster (tfd.stack, tfd.kube.Access): never showing secrets."""

from __future__ import annotations

import pytest
from pulumi import automation as auto

from infra.config import MINIKUBE_CONTEXT
from tfd.kube import Access
from tfd.stack import StackHandle


def handle(**config: str) -> StackHandle:
    """A StackHandle over a given config (no backend: only the config is read)."""
    h = StackHandle.__new__(StackHandle)
    h.name = "s"
    h._config = {f"tf-distributed:{k}": auto.ConfigValue(value=v, secret=k == "kubeconfig")
                 for k, v in config.items()}  # fmt: skip
    return h


@pytest.mark.parametrize(
    ("config", "access"),
    [
        ({}, Access(MINIKUBE_CONTEXT)),
        ({"clusterKind": "minikube", "kubeContext": ""}, Access(MINIKUBE_CONTEXT)),
        ({"clusterKind": "cloud", "kubeContext": "tfd-prod"}, Access("tfd-prod")),
        ({"clusterKind": "cloud", "kubeconfig": "apiVersion: v1"}, Access(None, "apiVersion: v1")),
        ({"kubeContext": "tfd-e2e", "kubeconfig": "k"}, Access("tfd-e2e", "k")),
    ],
    ids=["minikube default", "minikube empty context", "cloud context", "secret kubeconfig",
         "both"],
)  # fmt: skip
def test_the_cluster_is_the_one_the_stacks_provider_uses(config: dict, access: Access) -> None:
    assert handle(**config).access() == access


def test_the_kubeconfig_is_never_in_a_message() -> None:
    text = repr(handle(kubeconfig="client-key-data: SECRET").access())
    assert "SECRET" not in text and "<secret>" in text
