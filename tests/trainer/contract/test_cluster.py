"""Pod environment -> cluster spec and TF_CONFIG, and every ContractError with its message."""

from __future__ import annotations

import json
import re

import pytest

from trainer import contract
from trainer.errors import EXIT_CONTRACT, ContractError

BASE = {
    contract.ENV_POD_NAME: "tfd-worker-1",
    contract.ENV_STATEFULSET: "tfd-worker",
    contract.ENV_SERVICE: "tfd-workers",
    contract.ENV_NAMESPACE: "ml",
    contract.ENV_REPLICAS: "3",
}


def _env(**overrides: str | None) -> dict[str, str]:
    env = dict(BASE)
    for key, value in overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


@pytest.mark.parametrize(
    ("overrides", "index", "workers"),
    [
        (
            {},
            1,
            tuple(f"tfd-worker-{i}.tfd-workers.ml.svc.cluster.local:2222" for i in range(3)),
        ),
        (
            {contract.ENV_POD_NAME: "tfd-worker-0", contract.ENV_REPLICAS: "1"},
            0,
            ("tfd-worker-0.tfd-workers.ml.svc.cluster.local:2222",),
        ),
        (
            {contract.ENV_GRPC_PORT: "5000", contract.ENV_CLUSTER_DOMAIN: "k8s.example"},
            1,
            tuple(f"tfd-worker-{i}.tfd-workers.ml.svc.k8s.example:5000" for i in range(3)),
        ),
        (
            {contract.ENV_WORKER_HOSTS: "127.0.0.1:4000, 127.0.0.1:4001,127.0.0.1:4002"},
            1,
            ("127.0.0.1:4000", "127.0.0.1:4001", "127.0.0.1:4002"),
        ),
        (
            {
                contract.ENV_TF_CONFIG: json.dumps(
                    {"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 0}}
                ),
                contract.ENV_POD_NAME: "garbage",
            },
            0,
            ("a:1", "b:2"),
        ),
    ],
    ids=["dns", "single", "port-domain", "local-hosts", "explicit-tf-config-wins"],
)
def test_tf_config_from_env(overrides: dict[str, str], index: int, workers: tuple[str, ...]):
    spec = contract.cluster_spec_from_env(_env(**overrides))
    assert spec.task_index == index
    assert spec.workers == workers
    assert spec.is_chief == (index == 0)
    doc = json.loads(spec.tf_config_json())
    assert doc == {
        "cluster": {"worker": list(workers)},
        "task": {"type": "worker", "index": index},
    }


@pytest.mark.parametrize("replicas", ["2", "1000"])
def test_replicas_within_the_shared_bounds(replicas: str):
    spec = contract.cluster_spec_from_env(_env(**{contract.ENV_REPLICAS: replicas}))
    assert spec.num_workers == int(replicas)


def test_live_replicas_override_env():
    spec = contract.cluster_spec_from_env(_env(), replicas=5)
    assert spec.num_workers == 5


@pytest.mark.parametrize(
    ("overrides", "replicas", "match"),
    [
        ({contract.ENV_POD_NAME: "tfd-worker-3"}, None, r"ordinal must be < TFD_REPLICAS=3"),
        ({contract.ENV_POD_NAME: "tfd-worker"}, None, r"TFD_POD_NAME: must be"),
        ({contract.ENV_POD_NAME: "other-1"}, None, r"TFD_POD_NAME: must be"),
        ({contract.ENV_POD_NAME: "tfd-worker-01"}, None, r"TFD_POD_NAME: must be"),
        ({contract.ENV_POD_NAME: None}, None, r"TFD_POD_NAME: required"),
        ({contract.ENV_REPLICAS: None}, None, r"TFD_REPLICAS: required integer"),
        ({contract.ENV_REPLICAS: "two"}, None, r"TFD_REPLICAS: must be an integer"),
        ({contract.ENV_REPLICAS: "0"}, None, r"TFD_REPLICAS: must be an integer in \[1, 1000\]"),
        # The stack's bound (contract.REPLICAS), no longer the trainer's own 10,000.
        (
            {contract.ENV_REPLICAS: "1001"},
            None,
            r"TFD_REPLICAS: must be an integer in \[1, 1000\]; got '1001'",
        ),
        ({}, 0, r"live replica count must be >= 1"),
        ({contract.ENV_GRPC_PORT: "70000"}, None, r"TFD_GRPC_PORT: must be an integer"),
        ({contract.ENV_GRPC_PORT: "http"}, None, r"TFD_GRPC_PORT: must be an integer"),
        ({contract.ENV_STATEFULSET: "Bad_Name"}, None, r"TFD_STATEFULSET: must be a lowercase"),
        ({contract.ENV_SERVICE: None}, None, r"TFD_SERVICE: must be a lowercase"),
        ({contract.ENV_NAMESPACE: "ML"}, None, r"TFD_NAMESPACE: must be a lowercase"),
        ({contract.ENV_WORKER_HOSTS: "127.0.0.1:1"}, None, r"must list exactly TFD_REPLICAS=3"),
        (
            {contract.ENV_WORKER_HOSTS: "a:1,b:2,c"},
            None,
            r"TFD_WORKER_HOSTS: entry must be 'host:port'",
        ),
        ({contract.ENV_TF_CONFIG: "{not json"}, None, r"TF_CONFIG: must be JSON"),
        (
            {contract.ENV_TF_CONFIG: '{"cluster":{"worker":["a:1"]},"task":{"index":1}}'},
            None,
            r"task.index must be an integer in \[0, 0\]",
        ),
        (
            {
                contract.ENV_TF_CONFIG: json.dumps(
                    {"cluster": {"worker": ["a:1"]}, "task": {"type": "ps", "index": 0}}
                )
            },
            None,
            r"task.type must be 'worker'",
        ),
        *(
            (
                {
                    contract.ENV_TF_CONFIG: json.dumps(
                        {"cluster": {"worker": ["a:1", peer]}, "task": {"index": 0}}
                    )
                },
                None,
                rf"TF_CONFIG: cluster.worker: entry must be 'host:port'; got '{re.escape(peer)}'",
            )
            # No port: TensorFlow would wait for the peer (exit 75 after a while), not refuse it.
            for peer in ("tfd-worker-1", "tfd-worker-1:", "tfd-worker-1:grpc", "b:0", ":2222")
        ),
    ],
)
def test_contract_errors(overrides: dict[str, str | None], replicas: int | None, match: str):
    with pytest.raises(ContractError, match=match) as info:
        contract.cluster_spec_from_env(_env(**overrides), replicas)
    assert info.value.exit_code == EXIT_CONTRACT
