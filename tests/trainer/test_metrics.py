"""The metrics/probe HTTP server without TensorFlow."""

from __future__ import annotations

import os
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from trainer import contract
from trainer.errors import ContractError
from trainer.metrics import Metrics, MetricsServer


def _get(port: int, path: str) -> tuple[int, str]:
    # Generous: on a loaded 2-core CI machine the server thread once took over 5 s to answer.
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def scrape(port: int) -> dict[str, float]:
    """Sample name -> value of one /metrics scrape; histogram buckets and info series also
    under ``name{label="value",...}``."""
    status, text = _get(port, contract.METRICS_PATH)
    assert status == 200, f"{contract.METRICS_PATH} answered {status}"
    values = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            values[sample.name] = sample.value
            if sample.labels:
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
                values[f"{sample.name}{{{labels}}}"] = sample.value
    return values


def exposed(name: str) -> str:
    """The series a contract name appears as: histograms as ``<name>_count``."""
    return f"{name}_count" if name in contract.HISTOGRAMS else name


@pytest.fixture
def served() -> tuple[Metrics, int]:
    metrics = Metrics(task_index=2, world_size=3)
    server = MetricsServer(metrics, 0, host="127.0.0.1").start()
    yield metrics, server.port
    server.stop()


def test_all_contract_names_exported(served: tuple[Metrics, int]):
    metrics, port = served
    metrics.stepped(5, 128, 0.5)
    metrics.checkpointed(40, timestamp=1000.0)
    metrics.checkpoint_save_seconds.observe(0.2)
    values = scrape(port)
    missing = [name for name in contract.METRIC_NAMES if exposed(name) not in values]
    assert not missing, f"/metrics lacks {missing}"
    assert values[contract.METRIC_EXAMPLES_TOTAL] == 5 * 128
    step_time = contract.METRIC_STEP_SECONDS
    assert (values[f"{step_time}_count"], values[f"{step_time}_sum"]) == (1, 0.1)
    assert values[f'{step_time}_bucket{{le="0.1"}}'] == 1
    assert values[f'{step_time}_bucket{{le="0.05"}}'] == 0
    assert values[f"{contract.METRIC_CHECKPOINT_SAVE_SECONDS}_count"] == 1
    assert values[f'{contract.METRIC_INFO}{{task_index="2",world_size="3"}}'] == 1
    assert values[contract.METRIC_TASK_INDEX] == 2
    assert values[contract.METRIC_WORLD_SIZE] == 3
    assert values[contract.METRIC_STEPS_TOTAL] == 5
    assert values[contract.METRIC_CHECKPOINT_STEP] == 40
    assert values[contract.METRIC_CHECKPOINT_TIMESTAMP] == 1000.0
    assert values[contract.METRIC_CHECKPOINT_AGE] > 1000
    assert values[contract.METRIC_COMPLETED] == 0
    assert not any(name.endswith("_created") for name in values)


@pytest.mark.parametrize(
    ("ready", "path", "expected"),
    [
        (False, contract.READINESS_PATH, 503),
        (True, contract.READINESS_PATH, 200),
        (False, contract.LIVENESS_PATH, 200),
        (True, contract.LIVENESS_PATH, 200),
        (True, "/nope", 404),
    ],
)
def test_probes(served: tuple[Metrics, int], ready: bool, path: str, expected: int):
    metrics, port = served
    metrics.ready = ready
    assert _get(port, path)[0] == expected, f"GET {path}"


def test_serves_a_listening_socket_it_is_handed():
    """The supervisor's held socket (``TFD_METRICS_FD``): the server answers on it and closing
    the server leaves it listening for the next one."""
    import socket

    with socket.create_server(("127.0.0.1", 0)) as held:
        port = held.getsockname()[1]
        for _ in range(2):  # two children in turn on the same socket
            server = MetricsServer(Metrics(), 0, fd=os.dup(held.fileno())).start()
            assert server.port == port
            assert _get(port, contract.LIVENESS_PATH) == (200, "ok\n")
            server.stop()


def test_a_bad_descriptor_is_one_contract_line():
    with pytest.raises(ContractError) as info:
        MetricsServer(Metrics(), 0, fd=987654)
    assert str(info.value).startswith("TFD_METRICS_FD: 987654 is not the supervisor's listening "
                                      "socket: ")  # fmt: skip
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("error", "printed"),
    [(BrokenPipeError(32, "Broken pipe"), False), (ConnectionResetError(), False),
     (ValueError("a bug"), True)],
    ids=["broken-pipe", "reset", "other"],
)  # fmt: skip
def test_clients_that_went_away_are_not_a_traceback(
    error: Exception, printed: bool, capsys: pytest.CaptureFixture[str]
):
    """A probe the kubelet gave up on while it waited on the held socket is answered to a closed
    connection: no traceback for that, one for anything else."""
    server = MetricsServer(Metrics(), 0, host="127.0.0.1")
    try:
        raise error
    except Exception:  # noqa: BLE001 - handle_error reads the exception being handled
        server._server.handle_error(None, ("127.0.0.1", 1))
    finally:
        server._server.server_close()
    assert ("Traceback" in capsys.readouterr().err) is printed
