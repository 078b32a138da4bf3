"""Set-up before TensorFlow starts, and the guarded private coordination-service API."""

from __future__ import annotations

import importlib
import io
import json
from pathlib import Path

import pytest

from trainer import contract, placement, runtime
from trainer.local_cluster import worker_envs
from trainer.logs import Log


def test_coordination_api_is_found_in_the_installed_tensorflow():
    """Fails when a TensorFlow upgrade moves the private calls that set the heartbeat: then
    --heartbeat-timeout would silently fall back to TensorFlow's default."""
    api, why = runtime.coordination_api()
    assert api is not None, f"coordination-service API not found: {why}"
    job = api.coordinated_job(name="worker", num_tasks=2)
    assert (job.name, job.num_tasks) == ("worker", 2)


def test_missing_coordination_api_logs_and_keeps_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    real = importlib.import_module

    def no_pb2(name: str, *args: object) -> object:
        if name in runtime.COORDINATION_PB2_MODULES:
            raise ImportError(f"No module named {name!r}")
        return real(name, *args)

    monkeypatch.setattr(runtime.importlib, "import_module", no_pb2)
    api, why = runtime.coordination_api()
    assert api is None and "CoordinatedJob" in why, why

    env = worker_envs(2, str(tmp_path))[0]
    stream = io.StringIO()
    spec = contract.cluster_spec_from_env(env)
    assert placement.configure_heartbeat(spec, 3.0, Log(0, stream)) is False
    events = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [e["event"] for e in events] == ["warning"], events
    assert "--heartbeat-timeout not applied" in events[0]["message"], events
