"""tfd's command line: arguments, one-line errors, exit codes (tfd.cli, tfd.errors)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tfd import errors
from tfd.cli import EXIT_BUG, build_parser, main

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["status"], {"command": "status", "watch": False, "stack": None, "json": False}),
        (["status", "--stack", "dev", "--watch", "--json", "--timeout", "10m"],
         {"stack": "dev", "watch": True, "json": True, "timeout": "10m"}),
        (["logs", "-f", "--worker", "1", "--since", "5m"],
         {"follow": True, "worker": 1, "since": "5m"}),
        (["stop", "--stack", "prod"], {"command": "stop", "stack": "prod"}),
        (["runs", "--stack", "dev", "--json"], {"command": "runs", "stack": "dev", "json": True}),
        (["submit", "--epochs", "5", "--set", "batchSize=32", "--set", "seed=3", "--follow"],
         {"epochs": 5, "set": ["batchSize=32", "seed=3"], "follow": True, "run_id": None,
          "continue_run": False}),
        (["submit", "--continue", "--image", "r/t@sha256:" + "a" * 64],
         {"continue_run": True, "image": "r/t@sha256:" + "a" * 64}),
    ],
)  # fmt: skip
def test_arguments(argv: list[str], expected: dict) -> None:
    args = vars(build_parser().parse_args(argv))
    assert {k: args[k] for k in expected} == expected


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["submit", "--epoch", "2"], "unrecognized arguments: --epoch 2"),
        (["submit", "--run-id", "a", "--continue"], "not allowed with argument --run-id"),
        (["submit", "--epochs", "0"], "must be a whole number >= 1; got '0'"),
        (["logs", "--worker", "-1"], "argument --worker"),
        (["train"], "invalid choice: 'train'"),
        ([], "the following arguments are required: COMMAND"),
    ],
    ids=["no abbreviations", "run id or continue", "epochs", "worker", "command", "none"],
)  # fmt: skip
def test_bad_arguments_are_one_line_and_exit_2(
    argv: list[str], words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == errors.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("tfd: error: "), err
    assert words in err, err


def test_json_errors_are_a_document_on_stdout_too(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["submit", "--json", "--epochs", "x"]) == errors.EXIT_USAGE
    doc = json.loads(capsys.readouterr().out)
    assert doc["exit_code"] == 2 and "--epochs" in doc["error"][0], doc


def test_exit_codes_are_distinct_and_in_the_help(capsys: pytest.CaptureFixture[str]) -> None:
    codes = [
        errors.EXIT_OK,
        errors.EXIT_FAILED,
        errors.EXIT_USAGE,
        errors.EXIT_TIMEOUT,
        errors.EXIT_STOPPED,
        errors.EXIT_UNAVAILABLE,
        errors.EXIT_INTERRUPTED,
        EXIT_BUG,
    ]
    assert len(set(codes)) == len(codes)
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for code in codes:
        assert f"\n  {code:>3}  " in out, out


@pytest.mark.parametrize(
    ("error", "code"),
    [(errors.UsageError("x"), 2), (errors.StackError("x"), 5), (errors.ClusterError("x"), 5),
     (errors.WaitTimeoutError("x"), 3), (KeyboardInterrupt(), 130), (RuntimeError("bug"), 70)],
    ids=["usage", "stack", "cluster", "timeout", "ctrl-c", "bug"],
)  # fmt: skip
def test_every_failure_is_one_line_with_its_code(
    error: BaseException, code: int, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    def fail(args: object) -> int:
        raise error

    monkeypatch.setattr("tfd.commands.run", fail)
    assert main(["status"]) == code
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("tfd: error: ") and "Traceback" not in err


def test_python_dash_m_tfd_without_a_stack_is_one_line(tmp_path: Path) -> None:
    """The real entry point, in a directory that is no Pulumi project: one line, exit 2."""
    result = subprocess.run(
        [sys.executable, "-m", "tfd", "status", "--project-dir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == errors.EXIT_USAGE, result.stderr
    assert result.stderr == f"tfd: error: --project-dir: no Pulumi.yaml in {tmp_path}\n"


KEY_HOLDER = """
import base64, signal, sys, time
from kubernetes import config
from kubernetes.config import kube_config
from tfd.cli import signals_interrupt

pem = base64.b64encode(b"-----BEGIN PRIVATE KEY-----\\nx\\n-----END PRIVATE KEY-----\\n").decode()
doc = {"apiVersion": "v1", "kind": "Config", "current-context": "c",
       "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:1"}}],
       "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
       "users": [{"name": "u", "user": {"client-certificate-data": pem, "client-key-data": pem}}]}
with signals_interrupt():
    try:
        config.load_kube_config_from_dict(doc)
        print(*kube_config._temp_files.values(), flush=True)
        time.sleep(60)
    except KeyboardInterrupt:
        sys.exit(130)
"""


@pytest.mark.skipif(os.name == "nt", reason="POSIX signals")
@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP"])
def test_a_signal_leaves_no_client_key_on_disk(sig: str) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", KEY_HOLDER], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    assert proc.stdout is not None
    files = proc.stdout.readline().split()
    assert files and all(Path(f).exists() for f in files), files
    proc.send_signal(getattr(signal, sig))
    assert proc.wait(30) == 130
    left = [f for f in files if Path(f).exists()]
    assert left == [], f"{sig}: the kubeconfig's client key left in {left}"
