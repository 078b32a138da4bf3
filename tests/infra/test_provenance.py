"""Provenance: the program's commit and the configuration's digest, as outputs and annotations."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from infra import provenance
from tools.render import render_stack
from trainer import contract

ROOT = Path(__file__).resolve().parents[2]


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(cwd), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_the_commit_of_a_checkout_and_none_outside_one(tmp_path: Path):
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    assert provenance.source_commit(repo) == "", "a repository without a commit has none"
    (repo / "f").write_text("x")
    _git(repo, "add", "f")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    assert provenance.source_commit(repo) == _git(repo, "rev-parse", "HEAD")
    (repo / "sub").mkdir()
    assert provenance.source_commit(repo / "sub") == _git(repo, "rev-parse", "HEAD")
    outside = tmp_path / "plain"
    outside.mkdir()
    assert provenance.source_commit(outside) == ""


BASE = {"replicas": 2, "cpuRequest": ("500m",), "kubeconfig": True}


@pytest.mark.parametrize(
    ("other", "same"),
    [
        ({**BASE}, True),
        ({"kubeconfig": True, "cpuRequest": ("500m",), "replicas": 2}, True),  # key order
        ({**BASE, "replicas": 3}, False),
        ({**BASE, "kubeconfig": False}, False),  # a secret set or not: part of the config
    ],
)
def test_the_digest_follows_every_setting_but_no_secret_value(other: dict, same: bool):
    secret = {"kubeconfig"}
    assert (provenance.config_digest(other, secret) == provenance.config_digest(BASE, secret)) == (
        same
    ), other


def test_a_secret_value_never_reaches_the_digest():
    a = provenance.config_digest({"kubeconfig": "one kubeconfig"}, {"kubeconfig"})
    b = provenance.config_digest({"kubeconfig": "another"}, {"kubeconfig"})
    assert a == b


def test_every_up_records_its_provenance_on_the_statefulset_and_as_outputs():
    rendered = render_stack("prod")
    (sts,) = [r for r in rendered.resources if r.type == "kubernetes:apps/v1:StatefulSet"]
    annotations = sts.inputs["metadata"]["annotations"]
    outputs = rendered.outputs
    assert outputs["sourceCommit"] == _git(ROOT, "rev-parse", "HEAD")
    assert annotations[contract.SOURCE_COMMIT_ANNOTATION] == outputs["sourceCommit"]
    assert len(outputs["configHash"]) == 64
    assert annotations[contract.CONFIG_HASH_ANNOTATION] == outputs["configHash"]
    assert outputs["imageDigest"].startswith("sha256:"), outputs["imageDigest"]
    assert annotations[contract.IMAGE_DIGEST_ANNOTATION] == outputs["imageDigest"], annotations
    # On the StatefulSet's metadata only: a new commit or setting is no rollout.
    template = sts.inputs["spec"]["template"]["metadata"].get("annotations") or {}
    assert not set(contract.PROVENANCE_ANNOTATIONS.values()) & set(template), template
    other = render_stack("prod", {"tf-distributed:epochs": 99})
    assert other.outputs["configHash"] != outputs["configHash"]
