"""The per-cloud example stacks (``Pulumi.gke.yaml``, ``Pulumi.eks.yaml``, ``Pulumi.aks.yaml``)
with the real engine, each on kwok GPU nodes labelled and tainted as that cloud's GPU pools are
(``tools.cluster``: GKE's is the cluster's own GPU node; EKS's and AKS's are added here): every
worker lands on its cloud's node and on no other, on its cloud's ReadWriteMany class.

As in ``test_prod``, the test-only overrides point each stack at this cluster: no chart
download, a prebuilt image by digest (named clouds push and pin their images), two workers.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import pytest

from infra.config import parse_config
from tests.e2e.harness import Kube, Project, kubeconfig_with_context
from tests.e2e.test_prod import PREBUILT, SELECTOR, STATEFULSET
from tools import cluster
from tools.render import stack_config

NODES = {"gke": cluster.GPU_NODE, **{c: n for c, (n, _, _) in cluster.CLOUD_GPU_NODES.items()}}


@pytest.fixture(scope="module")
def cloud_nodes(kube: Kube) -> Iterator[None]:
    """EKS's and AKS's GPU nodes, beside the cluster's GKE-like one, for this module only."""
    nodes = [
        cluster.kwok_node(name, gpus=8, cpu="64", memory="512Gi", gpu_labels=labels,
                          gpu_taints=taints)
        for name, labels, taints in cluster.CLOUD_GPU_NODES.values()
    ]  # fmt: skip
    kube.run("create", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List",
                                                     "items": nodes}))  # fmt: skip
    try:
        for name, _, _ in cluster.CLOUD_GPU_NODES.values():
            kube.wait_for(f"node {name} Ready", lambda n=name: _ready(kube, n))
        yield
    finally:
        for name, _, _ in cluster.CLOUD_GPU_NODES.values():
            kube.run("delete", "node", name, "--wait=true", "--timeout=60s", check=False)


def _ready(kube: Kube, name: str) -> bool:
    node = kube.get("node", name) or {}
    conditions = node.get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


@pytest.mark.parametrize("cloud", sorted(NODES))
def test_each_clouds_stack_puts_its_gpu_workers_on_its_clouds_nodes_only(
    cloud: str, cloud_nodes: None, new_project: Callable[..., Project], kube: Kube
) -> None:
    namespace = f"tfd-{cloud}"
    project = new_project(f"cloud{cloud}", stack_file=cloud)
    project.set("kubeconfig", kubeconfig_with_context(f"tfd-{cloud}"), secret=True)
    project.set("grafanaAdminPassword", f"{cloud}-e2e-grafana", secret=True)
    project.set_many({"monitoringEnabled": False, "imageReference": PREBUILT, "replicas": 2,
                      "namespace": namespace, "checkpointRetention": "Delete"})  # fmt: skip
    project.up()
    kube.wait_for(
        f"{cloud}: 2 ready workers", lambda: kube.ready_replicas(STATEFULSET, namespace) == 2
    )
    pods = kube.items("pods", namespace, SELECTOR)
    where = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods}
    assert set(where.values()) == {NODES[cloud]}, f"stack {cloud}: workers on {where}"
    expected_class = parse_config(*stack_config(cloud), {}).storage.storage_class
    claim = kube.get("persistentvolumeclaim", "tfd-checkpoints", namespace)
    assert claim["spec"]["storageClassName"] == expected_class, claim["spec"]
    project.destroy()
