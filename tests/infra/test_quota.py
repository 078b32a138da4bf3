"""The training namespace's ResourceQuota: one worker's resources times the most workers."""

from __future__ import annotations

import pytest

from infra.config import parse_config, parse_quantity
from infra.quota import quota_hard
from infra.workers import max_replicas
from tools.render import render_stack, stack_config

P = "tf-distributed:"

# (stack, overrides, the rendered quota's spec.hard)
CASES = [
    (
        "prod",
        {},
        {
            "pods": "4",
            "requests.cpu": "16",
            "limits.cpu": "32",
            "requests.memory": "64Gi",
            "limits.memory": "128Gi",
            "requests.nvidia.com/gpu": "4",
        },
    ),
    # With the HPA: its maximum (3), not the starting replicas (2); no GPUs, no GPU line.
    (
        "dev",
        {},
        {
            "pods": "3",
            "requests.cpu": "1500m",
            "limits.cpu": "3",
            "requests.memory": "3Gi",
            "limits.memory": "6Gi",
        },
    ),
    (
        "prod",
        {P + "replicas": 8, P + "gpusPerWorker": 2, P + "memoryLimit": "40Gi"},
        {
            "pods": "8",
            "requests.cpu": "32",
            "limits.cpu": "64",
            "requests.memory": "128Gi",
            "limits.memory": "320Gi",
            "requests.nvidia.com/gpu": "16",
        },
    ),
]


@pytest.mark.parametrize(("stack", "overrides", "hard"), CASES)
def test_quota_is_one_worker_times_the_most_workers(stack, overrides, hard):
    result = render_stack(stack, overrides)
    quota = result.one("ResourceQuota")
    where = f"Pulumi.{stack}.yaml + {overrides}: ResourceQuota {quota['metadata']['name']}"
    assert quota["metadata"]["namespace"] == result.one("StatefulSet")["metadata"]["namespace"]
    assert quota["spec"]["hard"] == hard, where


@pytest.mark.parametrize(("stack", "overrides"), [("dev", {}), ("prod", {})])
def test_quota_is_derived_from_the_statefulsets_own_container(stack, overrides):
    """The figures come from the rendered container's resources, not a copy of the config."""
    result = render_stack(stack, overrides)
    hard = result.one("ResourceQuota")["spec"]["hard"]
    resources = result.one("StatefulSet")["spec"]["template"]["spec"]["containers"][0]["resources"]
    count = max_replicas(parse_config(*stack_config(stack, overrides), {}))
    for part in ("requests", "limits"):
        for name, amount in resources[part].items():
            key = f"{part}.{name}" if name in ("cpu", "memory") else f"requests.{name}"
            assert parse_quantity(hard[key]) == parse_quantity(str(amount)) * count, key
    assert hard["pods"] == str(count)


def test_the_quota_forbids_more_pods_than_replicas_ever_reach():
    # Without autoscaling the StatefulSet never has more pods than `replicas` (no surge: fixed
    # pod names, OnDelete): `replicas: 5000` set by a worker could not start a 5th pod.
    cfg = parse_config(*stack_config("prod"), {})
    assert quota_hard(cfg)["pods"] == str(cfg.workers.replicas) == "4"
