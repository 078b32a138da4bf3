"""The pod environment's single values (ports, delays, API access, run id) and their errors."""

from __future__ import annotations

import pytest

from trainer import contract
from trainer.errors import ContractError


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
        ("gs://b/r/20261201-143000", "20261201-143000", "20261201-143000"),
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
