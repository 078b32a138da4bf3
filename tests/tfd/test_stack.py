"""How tfd reaches the stack's cluster (tfd.stack, tfd.kube.Access): never showing secrets."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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
