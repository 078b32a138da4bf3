"""No job that a pull request starts can read a deploy secret.

A pull request runs its own code (the program, the policy pack, the Makefile), so any secret
its jobs can reference is the pull request author's. Those jobs may use only
:data:`PREVIEW_SECRETS`: the ``preview`` environment's read-only credentials and the
workflow's own ``GITHUB_TOKEN``. Every way a job can reach a secret counts: the workflow's and
the job's ``env``, a step's ``env``, ``with`` and ``run``, conditions, containers, and a
reusable workflow's ``secrets`` (an explicit mapping, or ``inherit``, which hands over every
secret the called workflow names).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / ".github" / "workflows"
PULL_REQUEST_EVENTS = frozenset({"pull_request", "pull_request_target"})
PREVIEW_SECRETS = frozenset(
    {
        "GITHUB_TOKEN",
        "PREVIEW_PULUMI_ACCESS_TOKEN",
        "PREVIEW_PULUMI_BACKEND_URL",
        "PREVIEW_PULUMI_CONFIG_PASSPHRASE",
        "PREVIEW_KUBECONFIG",
    }
)
"""The secrets a pull-request job may name (docs/ci.md, "The `preview` environment")."""
DEPLOY_SECRETS = frozenset(
    {"PULUMI_ACCESS_TOKEN", "PULUMI_BACKEND_URL", "PULUMI_CONFIG_PASSPHRASE", "KUBECONFIG"}
)
"""The deploy environment's secrets (docs/ci.md): only behind an environment with reviewers."""
SECRET = re.compile(r"\bsecrets\s*\.\s*([A-Za-z_][A-Za-z0-9_]*)")
EVERY_SECRET = re.compile(r"\bsecrets\s*\[|toJSON\(\s*secrets\s*\)")
"""An index by expression or a dump of the context: any secret at all."""
ALL = "<every secret>"


def load(path: Path) -> dict[str, Any]:
    doc = yaml.safe_load(path.read_text())
    # YAML 1.1 reads the key `on` as True.
    if True in doc:
        doc["on"] = doc.pop(True)
    return doc


def triggers(doc: dict[str, Any]) -> set[str]:
    on = doc.get("on") or {}
    if isinstance(on, str):
        return {on}
    return set(on)


def referenced(value: Any) -> set[str]:
    """Secret names an expression anywhere in ``value`` reads (:data:`ALL` for any)."""
    text = json.dumps(value)
    names = set(SECRET.findall(text))
    if EVERY_SECRET.search(text):
        names.add(ALL)
    return names


def job_secrets(doc: dict[str, Any], job: dict[str, Any], here: Path) -> Iterator[str]:
    """Every secret a job can read: its own text, the workflow's ``env``, and through a
    reusable workflow (``secrets: inherit`` hands over whatever the called file names)."""
    yield from referenced(doc.get("env") or {})
    yield from referenced(job)
    uses = str(job.get("uses") or "")
    if uses and job.get("secrets") == "inherit":
        if uses.startswith("./"):
            called = (here / uses).resolve()
            called_doc = load(called)
            for called_job in (called_doc.get("jobs") or {}).values():
                yield from job_secrets(called_doc, called_job, here)
        else:
            # A workflow of another repository: what it reads cannot be checked here.
            yield ALL


def pull_request_violations(path: Path, root: Path = ROOT) -> list[str]:
    """``<file> job <id>: secrets.<NAME>`` for each secret outside :data:`PREVIEW_SECRETS` a
    pull-request-triggered job of ``path`` can read."""
    doc = load(path)
    if not triggers(doc) & PULL_REQUEST_EVENTS:
        return []
    out = []
    for job_id, job in (doc.get("jobs") or {}).items():
        for name in sorted(set(job_secrets(doc, job, root)) - PREVIEW_SECRETS):
            out.append(f"{path.name} job {job_id}: secrets.{name}")
    return out


FILES = sorted(WORKFLOWS.glob("*.yml"))


@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_no_pull_request_job_can_read_a_deploy_secret(path: Path) -> None:
    assert pull_request_violations(path) == []


def test_the_preview_runs_with_the_preview_environment_and_its_secrets_only() -> None:
    doc = load(WORKFLOWS / "preview.yml")
    assert triggers(doc) == {"pull_request"}
    preview = doc["jobs"]["preview"]
    assert preview["environment"] == "preview"
    names = set(job_secrets(doc, preview, ROOT))
    assert {"PREVIEW_PULUMI_ACCESS_TOKEN", "PREVIEW_KUBECONFIG"} <= names <= PREVIEW_SECRETS


def test_deploy_secrets_are_read_only_behind_a_deploy_environment() -> None:
    for path in FILES:
        doc = load(path)
        for job_id, job in (doc.get("jobs") or {}).items():
            names = set(job_secrets(doc, job, ROOT)) & (DEPLOY_SECRETS | {ALL})
            if names:
                assert job.get("environment") not in (None, "preview"), (
                    f"{path.name} job {job_id} reads {sorted(names)} outside a deploy environment"
                )
                assert not triggers(doc) & PULL_REQUEST_EVENTS, f"{path.name} job {job_id}"


def test_docs_list_exactly_the_preview_secrets() -> None:
    text = (ROOT / "docs" / "ci.md").read_text()
    section = text[text.index("### The `preview` environment") :]
    section = section[: section.index("\n### ", 1)]
    listed = set(re.findall(r"^\| `([A-Z_]+)` \|", section, flags=re.M))
    assert listed == PREVIEW_SECRETS - {"GITHUB_TOKEN"}, listed


# --- The checker itself: each way in is caught. ---

CALLED = """name: called
on: workflow_call
jobs:
  up:
    runs-on: ubuntu-latest
    steps:
      - run: pulumi up
        env:
          PULUMI_CONFIG_PASSPHRASE: ${{ secrets.PULUMI_CONFIG_PASSPHRASE }}
"""

PR_JOB = """name: pr
on: {on}
{top}jobs:
  preview:
    runs-on: ubuntu-latest
{job}"""

# (id, workflow-level text, job text, the secret that must be reported)
LEAKS = [
    (
        "job-env",
        "",
        "    env:\n      T: ${{ secrets.PULUMI_ACCESS_TOKEN }}\n    steps: [{run: x}]\n",
        "PULUMI_ACCESS_TOKEN",
    ),
    (
        "step-env",
        "",
        "    steps:\n      - run: x\n        env:\n          K: ${{ secrets.KUBECONFIG }}\n",
        "KUBECONFIG",
    ),
    (
        "with",
        "",
        "    steps:\n      - uses: a/b@" + "0" * 40 + "\n        with:\n"
        "          token: ${{ secrets.PULUMI_ACCESS_TOKEN }}\n",
        "PULUMI_ACCESS_TOKEN",
    ),
    (
        "run",
        "",
        "    steps:\n      - run: echo ${{ secrets.PULUMI_CONFIG_PASSPHRASE }}\n",
        "PULUMI_CONFIG_PASSPHRASE",
    ),
    (
        "workflow-env",
        "env:\n  T: ${{ secrets.PULUMI_ACCESS_TOKEN }}\n",
        "    steps: [{run: x}]\n",
        "PULUMI_ACCESS_TOKEN",
    ),
    ("index", "", "    steps:\n      - run: echo ${{ secrets[format('{0}', 'X')] }}\n", ALL),
    ("dump", "", "    steps:\n      - run: echo '${{ toJSON(secrets) }}'\n", ALL),
]


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / ".github" / "workflows" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.mark.parametrize("event", sorted(PULL_REQUEST_EVENTS))
@pytest.mark.parametrize(("case", "top", "job", "secret"), LEAKS, ids=[c[0] for c in LEAKS])
def test_a_deploy_secret_in_a_pull_request_job_is_reported(
    tmp_path: Path, event: str, case: str, top: str, job: str, secret: str
) -> None:
    path = _write(tmp_path, "pr.yml", PR_JOB.format(on=event, top=top, job=job))
    assert pull_request_violations(path, tmp_path) == [f"pr.yml job preview: secrets.{secret}"]


def test_the_same_secret_on_push_only_is_not_a_pull_request_leak(tmp_path: Path) -> None:
    job = "    steps:\n      - run: echo ${{ secrets.PULUMI_ACCESS_TOKEN }}\n"
    path = _write(tmp_path, "push.yml", PR_JOB.format(on="[push]", top="", job=job))
    assert pull_request_violations(path, tmp_path) == []
    both = _write(tmp_path, "both.yml", PR_JOB.format(on="[push, pull_request]", top="", job=job))
    assert pull_request_violations(both, tmp_path) == [
        "both.yml job preview: secrets.PULUMI_ACCESS_TOKEN"
    ]


@pytest.mark.parametrize(
    ("job", "secret"),
    [
        (
            "    uses: ./.github/workflows/called.yml\n    secrets: inherit\n",
            "PULUMI_CONFIG_PASSPHRASE",
        ),
        (
            "    uses: ./.github/workflows/called.yml\n    secrets:\n"
            "      PULUMI_CONFIG_PASSPHRASE: ${{ secrets.PULUMI_CONFIG_PASSPHRASE }}\n",
            "PULUMI_CONFIG_PASSPHRASE",
        ),
        (
            "    uses: other/repo/.github/workflows/up.yml@"
            + "0" * 40
            + "\n    secrets: inherit\n",
            ALL,
        ),
    ],
    ids=["inherit", "mapping", "remote-inherit"],
)
def test_a_deploy_secret_through_a_reusable_workflow_is_reported(
    tmp_path: Path, job: str, secret: str
) -> None:
    _write(tmp_path, "called.yml", CALLED)
    # A job that calls a reusable workflow has no runs-on.
    text = PR_JOB.format(on="pull_request", top="", job=job)
    text = text.replace("    runs-on: ubuntu-latest\n", "")
    path = _write(tmp_path, "pr.yml", text)
    assert pull_request_violations(path, tmp_path) == [f"pr.yml job preview: secrets.{secret}"]


def test_preview_secrets_pass(tmp_path: Path) -> None:
    job = (
        "    environment: preview\n    steps:\n      - run: x\n        env:\n"
        "          T: ${{ secrets.PREVIEW_PULUMI_ACCESS_TOKEN }}\n"
        "          G: ${{ secrets.GITHUB_TOKEN }}\n"
    )
    path = _write(tmp_path, "pr.yml", PR_JOB.format(on="pull_request", top="", job=job))
    assert pull_request_violations(path, tmp_path) == []
