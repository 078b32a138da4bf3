"""How tfd reaches the stack's cluster (tfd.stack, tfd.kube.Access): never showing secrets."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pulumi import automation as auto

from infra.config import MINIKUBE_CONTEXT
from tests.tfd.test_settings import ROOT, current
from tfd import settings
from tfd.errors import StackError, UsageError
from tfd.kube import Access
from tfd.stack import PULUMI_MISSING, StackHandle, Target


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


def _fake_cli(tmp_path: Path) -> Path:
    """A ``pulumi`` executable that exits 42 on SIGINT, as the real CLI ends a cancelled update.
    Python, not a shell: a shell started with SIGINT ignored (a background job of a
    non-interactive shell, as CI runs) cannot trap it, while Python's handler (like the Go
    CLI's) is installed either way."""
    cli = tmp_path / "pulumi"
    cli.write_text(
        f"#!{sys.executable}\n"
        "import signal, sys, time\n"
        "signal.signal(signal.SIGINT, lambda *_: sys.exit(42))\n"
        "print('ready', flush=True)\n"
        "time.sleep(30)\n"
    )
    cli.chmod(0o755)
    return cli


@pytest.mark.skipif(os.name == "nt", reason="POSIX signals")
def test_cancel_update_interrupts_this_processs_pulumi_up_only(tmp_path: Path) -> None:
    cli = _fake_cli(tmp_path)
    up = subprocess.Popen([str(cli), "--non-interactive", "up", "--yes"], stdout=subprocess.PIPE)
    preview = subprocess.Popen([str(cli), "preview"], stdout=subprocess.PIPE)
    try:
        for proc in (up, preview):  # each has installed its handler
            assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        assert StackHandle.cancel_update(None) is True  # type: ignore[arg-type]
        assert up.wait(60) == 42, "pulumi up was not interrupted"
        assert preview.poll() is None, "a pulumi that is not an up was interrupted"
    finally:
        for proc in (up, preview):
            proc.kill()
            proc.wait()
    assert StackHandle.cancel_update(None) is False  # type: ignore[arg-type]


@pytest.mark.parametrize("before", [b"config:\n  tf-distributed:epochs: '3'\n", None])
def test_restore_puts_the_settings_file_back_byte_for_byte(tmp_path: Path, before) -> None:
    h = handle(epochs="3")
    h.name, h.project_dir = "org/tf-distributed/dev", tmp_path
    path = tmp_path / "Pulumi.dev.yaml"
    if before is not None:
        path.write_bytes(before)
    saved = h.saved_settings()
    path.write_text("config:\n  tf-distributed:epochs: '9'\n  tf-distributed:runId: r2\n")
    h.restore(saved)
    after = path.read_bytes() if path.exists() else None
    assert after == before, f"{path.name}: {after!r} after restore, {before!r} before"
    assert h._config is None, "the config read before the change is still cached"


def test_a_read_only_command_finds_its_names_without_minikubes_docker_daemon(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``tfd status``/``tfd runs`` before the first ``up`` ended: the names from the dev
    stack's config, whose image rules (minikube's Docker daemon) are for ``tfd submit``."""
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    h = StackHandle.__new__(StackHandle)
    h.name, h.project_dir, h._config = "dev", ROOT, current("dev")
    monkeypatch.setattr(h, "outputs", lambda: {})
    assert h.target() == Target("tfd-dev", "tfd-worker")
    raw, secret_keys = settings.merged(settings.project_values(ROOT), h.config(), {})
    with pytest.raises(UsageError, match="tf-distributed:dockerHost: a minikube stack"):
        settings.validate(raw, secret_keys, stack="dev")  # what submit checks


def test_without_the_pulumi_cli_tfd_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no pulumi there
    with pytest.raises(StackError) as info:
        StackHandle("dev", ROOT)
    assert str(info.value) == PULUMI_MISSING
    assert "curl -fsSL https://get.pulumi.com | sh" in PULUMI_MISSING
    assert "https://www.pulumi.com/docs/install/" in PULUMI_MISSING


def test_a_listing_that_meets_a_state_file_being_renamed_is_tried_again(monkeypatch) -> None:
    from tfd import stack as stack_module

    monkeypatch.setattr(stack_module.time, "sleep", lambda s: None)
    race = auto.CommandError(auto.CommandResult(
        stdout="", stderr="error: list bucket: blob (code=NotFound): lstat s.json.1.tmp", code=1
    ))  # fmt: skip

    class Workspace:
        calls = 0

        def list_stacks(self) -> list[str]:
            self.calls += 1
            if self.calls < 3:
                raise race
            return ["dev"]

    ws = Workspace()
    assert stack_module._list_stacks(ws) == ["dev"] and ws.calls == 3
    other = auto.CommandError(auto.CommandResult(stdout="", stderr="error: denied", code=1))
    ws_other = Workspace()
    ws_other.list_stacks = lambda: (_ for _ in ()).throw(other)  # type: ignore[method-assign]
    with pytest.raises(auto.CommandError):
        stack_module._list_stacks(ws_other)


def test_outputs_that_an_update_changes_between_the_sdks_two_reads_are_read_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The SDK reads the outputs masked, then in plaintext; a first ``pulumi up`` that writes
    them in between made ``KeyError: 'configHash'`` (``tfd status``, exit 70)."""
    import json

    from tfd import stack as stack_module

    monkeypatch.setattr(stack_module.time, "sleep", lambda s: None)
    new = {"namespace": "tfd-dev", "configHash": "ab12"}
    reads = iter([{"namespace": "tfd-dev"}, new, new, new])  # masked before, plaintext after
    ws = auto.LocalWorkspace.__new__(auto.LocalWorkspace)
    monkeypatch.setattr(
        ws, "_run_pulumi_cmd_sync",
        lambda *a, **k: auto.CommandResult(stdout=json.dumps(next(reads)), stderr="", code=0),
    )  # fmt: skip
    with pytest.raises(KeyError):  # the SDK's own read, as tfd status met it
        ws.stack_outputs("dev")
    reads = iter([{"namespace": "tfd-dev"}, new, new, new])

    class Stack:
        def outputs(self) -> object:
            return ws.stack_outputs("dev")

    h = StackHandle.__new__(StackHandle)
    h.name, h.stack = "dev", Stack()
    assert h.outputs() == new
