"""Pod environment -> TF_CONFIG, and every ContractError with its message."""

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
        ({contract.ENV_REPLICAS: "0"}, None, r"TFD_REPLICAS: must be an integer in \[1"),
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


@pytest.mark.parametrize(
    ("value", "expected"),
    [("", 8080), ("9090", 9090), ("1", 1)],
)
def test_metrics_port(value: str, expected: int):
    assert contract.metrics_port({contract.ENV_METRICS_PORT: value}) == expected


@pytest.mark.parametrize("value", ["0", "65536", "x"])
def test_metrics_port_errors(value: str):
    with pytest.raises(
        ContractError, match=r"TFD_METRICS_PORT: must be an integer in \[1, 65535\]"
    ):
        contract.metrics_port({contract.ENV_METRICS_PORT: value})


@pytest.mark.parametrize(("value", "expected"), [("", 0.0), ("2.5", 2.5), ("10", 10.0)])
def test_start_delay_seconds(value: str, expected: float):
    assert contract.start_delay_seconds({contract.ENV_START_DELAY_SECONDS: value}) == expected


@pytest.mark.parametrize("value", ["-1", "10.5", "x"])
def test_start_delay_seconds_errors(value: str):
    with pytest.raises(ContractError) as info:
        contract.start_delay_seconds({contract.ENV_START_DELAY_SECONDS: value})
    assert str(info.value) == (
        f"TFD_START_DELAY_SECONDS: must be a number of seconds in [0, 10]; got {value!r}"
    )


@pytest.mark.parametrize(("value", "expected"), [("", "env"), ("env", "env"), ("api", "api")])
def test_replicas_source(value: str, expected: str):
    assert contract.replicas_source({contract.ENV_REPLICAS_SOURCE: value}) == expected


def test_replicas_source_error():
    with pytest.raises(ContractError, match=r"TFD_REPLICAS_SOURCE: must be one of"):
        contract.replicas_source({contract.ENV_REPLICAS_SOURCE: "dns"})


def test_metric_names_are_unique_and_prefixed():
    assert len(set(contract.METRIC_NAMES)) == len(contract.METRIC_NAMES)
    assert all(name.startswith("tfd_") for name in contract.METRIC_NAMES)


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, False),
        ({contract.ENV_API_URL: "  "}, False),
        ({contract.ENV_API_URL: "https://kubernetes.default.svc"}, True),
        ({contract.ENV_REPLICAS_SOURCE: "api"}, True),  # implies the default URL
        ({contract.ENV_REPLICAS_SOURCE: "env", contract.ENV_API_URL: "http://x"}, True),
    ],
)
def test_api_configured(env: dict[str, str], expected: bool):
    assert contract.api_configured(env) is expected, env


@pytest.mark.parametrize(
    ("directory", "run_id", "expected"),
    [
        ("/ckpt/run-7", None, "run-7"),  # unset: the directory's last segment
        ("/ckpt/run-7/", None, "run-7"),
        ("gs://bucket/runs/2026-12-01.a_b", None, "2026-12-01.a_b"),
        ("/ckpt/run-7", "run-7", "run-7"),
        ("s3://b/r/20261201-143000", "20261201-143000", "20261201-143000"),
        ("/ckpt/my dir", None, "my dir"),  # not validated when derived: only a label
    ],
)
def test_run_id(directory: str, run_id: str | None, expected: str):
    env = {contract.ENV_CHECKPOINT_DIR: directory}
    if run_id is not None:
        env[contract.ENV_RUN_ID] = run_id
    assert contract.run_id_from_env(env) == expected


@pytest.mark.parametrize(
    ("directory", "run_id", "match"),
    [
        ("/ckpt", "run-7", r"TFD_CHECKPOINT_DIR: must be '<root>/run-7' \(one directory per "),
        ("/ckpt/run-7/x", "run-7", r"TFD_CHECKPOINT_DIR: must be '<root>/run-7'"),
        ("/ckpt/-bad", "-bad", r"TFD_RUN_ID: must be 1-63 letters"),
        ("/ckpt/a/b", "a/b", r"TFD_RUN_ID: must be 1-63 letters"),
        ("/ckpt/" + "x" * 64, "x" * 64, r"TFD_RUN_ID: must be 1-63 letters"),
    ],
)
def test_run_id_errors(directory: str, run_id: str, match: str):
    env = {contract.ENV_CHECKPOINT_DIR: directory, contract.ENV_RUN_ID: run_id}
    with pytest.raises(ContractError, match=match):
        contract.run_id_from_env(env)


def test_supervisor_restarts_planned_codes_only():
    from trainer import errors

    assert contract.SUPERVISOR_RESTART_CODES == (
        errors.EXIT_PEER_LOST,
        errors.EXIT_RESTART,
        errors.EXIT_NOT_ADMITTED,
    )
    assert set(contract.SUPERVISOR_WAIT_CODES) <= set(contract.SUPERVISOR_RESTART_CODES)
    assert errors.RolloutRequested.exit_code == errors.EXIT_RESTART
    assert errors.NotAdmittedError.exit_code == errors.EXIT_NOT_ADMITTED


def test_api_calls_are_the_documented_three():
    assert [tuple(c) for c in contract.API_CALLS] == [
        ("apps", "statefulsets", "get"),
        ("apps", "statefulsets/scale", "patch"),
        ("", "pods", "delete"),
    ]
    assert contract.api_resource_names(contract.API_CALLS[2], "w", 2) == ["w-0", "w-1"]
