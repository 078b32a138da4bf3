"""Every rendered manifest passes kubernetes-validate (strict) and checkov, for both stacks."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SKIPS_FILE = ROOT / "infra" / "checkov-skips.yaml"
KUBERNETES_VERSIONS = ("1.30", "1.35")
CRD_KINDS = frozenset({"PodMonitor", "PrometheusRule"})
"""Custom resources of the Prometheus operator: kubernetes-validate ships only built-in schemas,
so these kinds are excluded there by name (checkov still scans them)."""
MAX_SKIPS_PER_STACK = 3
STACKS = ("dev", "prod")


def _manifest_files(directory: Path) -> list[Path]:
    files = sorted((directory / "manifests").glob("*.yaml"))
    assert files, f"{directory}/manifests: no manifests rendered"
    return files


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("stack", STACKS)
def test_kubernetes_validate_strict(rendered_dirs, stack, version):
    errors, checked = [], 0
    for path in _manifest_files(rendered_dirs[stack]):
        doc = yaml.safe_load(path.read_text())
        if doc["kind"] in CRD_KINDS:
            continue
        try:
            kubernetes_validate.validate(doc, version, strict=True)
            checked += 1
        except (kubernetes_validate.ValidationError, kubernetes_validate.SchemaNotFoundError) as e:
            errors.append(f"{path.name}: {getattr(e, 'message', e)}")
    assert not errors, f"stack {stack}, Kubernetes {version}:\n" + "\n".join(errors)
    assert checked >= 12, f"stack {stack}: only {checked} manifests validated"


def test_every_excluded_kind_is_a_custom_resource(rendered):
    builtin_groups = ("v1", "apps/", "rbac.", "policy/", "autoscaling/", "networking.k8s.io/")
    for stack in STACKS:
        for manifest in rendered[stack].manifests:
            if manifest["kind"] in CRD_KINDS:
                assert not manifest["apiVersion"].startswith(builtin_groups), manifest["kind"]


def _skips() -> dict[str, list[dict]]:
    return yaml.safe_load(SKIPS_FILE.read_text())


@pytest.mark.parametrize("stack", STACKS)
def test_checkov_skips_are_few_and_explained(stack):
    skips = _skips()[stack]
    assert len(skips) <= MAX_SKIPS_PER_STACK, f"{SKIPS_FILE.name} [{stack}]: {len(skips)} skips"
    for skip in skips:
        assert skip["check"].startswith("CKV"), f"{SKIPS_FILE.name} [{stack}]: {skip}"
        assert len(skip.get("reason", "")) > 40, f"{SKIPS_FILE.name} [{stack}]: no real reason"


@pytest.mark.parametrize("stack", STACKS)
def test_checkov_finds_nothing(rendered_dirs, checkov, stack):
    skipped = [s["check"] for s in _skips()[stack]]
    cmd = [checkov, "--framework", "kubernetes", "--skip-download", "--quiet", "-o", "json"]
    cmd += ["-d", str(rendered_dirs[stack] / "manifests")]
    if skipped:
        cmd += ["--skip-check", ",".join(skipped)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, check=False)
    try:
        report = json.loads(proc.stdout)
    except ValueError:
        pytest.fail(f"stack {stack}: checkov printed no JSON (rc {proc.returncode}): {proc.stderr}")
    failed = [
        f"{c['check_id']} {c['resource']}: {c['check_name']}"
        for c in report.get("results", {}).get("failed_checks", [])
    ]
    assert not failed, f"stack {stack}: checkov failed checks:\n" + "\n".join(failed)
    assert report["summary"]["passed"] > 50, f"stack {stack}: checkov summary {report['summary']}"
    assert report["summary"]["parsing_errors"] == 0, f"stack {stack}: {report['summary']}"
