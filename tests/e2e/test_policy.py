"""The policy pack under the real CLI: ``pulumi preview --policy-pack policy``.

The engine launches the pack through the Python language host that ``make tools`` builds
(``pulumi-language-python``, see ``tools/build-tools.sh``), in the pack's own venv.

Three groups:

- every committed stack and every violating variant of ``tests/policy/variants.py``, as a
  stand-in program that registers the rendered manifests (the real program under mocks) as
  resources with the same Kubernetes type tokens and inputs. No provider or cluster is
  contacted, so the ``dev`` (minikube + Docker) and ``prod`` (cloud) stacks are checked too;
- this repository's program on the local cluster (``e2e`` and ``prod`` stacks, inline through
  the automation API, as the rest of the suite), passing the pack, and failing it when the
  policy config says the cluster is a cloud one;
- the pull-request workflow's preview command, read from ``.github/workflows/preview.yml`` and
  run by the CLI itself on the ``e2e`` stack.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from pulumi import automation as auto

from tests.e2e.conftest import rendered_resources
from tests.e2e.harness import KUBECONFIG, PASSPHRASE, ROOT, TOOLS, Project, kubeconfig_with_context
from tests.policy.variants import STACKS, VARIANTS, Variant
from tools.render import Registered

PACK = ROOT / "policy"
PACK_NAME = "tf-distributed"
FACT_POLICIES = ("images-pinned", "gpu-scheduling", "checkpoint-retention", "namespace-isolation")
WORKFLOW = ROOT / ".github" / "workflows" / "preview.yml"
PREBUILT = "registry.example/tfd/tf-distributed-trainer@sha256:" + "5" * 64

STANDIN_PROGRAM = '''"""Stand-in: each rendered resource with its type token and inputs."""
import json
import pulumi


class Rendered(pulumi.ComponentResource):
    def __init__(self, type_: str, name: str, inputs: dict) -> None:
        super().__init__(type_, name, inputs)
        # Stack policies read the resources' state: the same inputs.
        self.register_outputs(inputs)


for r in json.load(open("resources.json")):
    Rendered(r["type"], r["name"], r["inputs"])
'''


def _cli() -> str:
    cli = TOOLS / "bin" / "pulumi"
    for tool in ("pulumi", "pulumi-language-python", "pulumi-language-python-exec"):
        if not (TOOLS / "bin" / tool).exists():
            pytest.fail(f"{TOOLS / 'bin' / tool} missing: run `make tools` (or `make e2e`)")
    if not (ROOT / ".venv-policy" / "bin" / "python").exists():
        pytest.fail(".venv-policy missing: run `make test` (it creates the policy pack's venv)")
    return str(cli)


def violations(output: str) -> dict[str, list[str]]:
    """``{policy: [lines that follow its '[mandatory]  <policy>' header]}`` of CLI output."""
    found: dict[str, list[str]] = {}
    current: str | None = None
    for line in output.splitlines():
        header = re.search(r"\[(?:mandatory|advisory)\]\s+(\S+)\s+\(", line)
        if header:
            current = header.group(1)
            found.setdefault(current, [])
        elif current and line.startswith(" " * 10):
            found[current].append(line.strip())
        else:
            current = None
    return found


def _standin_dir(tmp: Path, stack: str, resources: list[Registered]) -> Path:
    """A project named like this one, with this project's config block and the stack's file (the
    pack reads its facts from them), whose program registers ``resources``."""
    tmp.mkdir(parents=True, exist_ok=True)
    project = yaml.safe_load((ROOT / "Pulumi.yaml").read_text())
    project["runtime"] = "python"  # the interpreter comes from PATH (.venv-policy)
    (tmp / "Pulumi.yaml").write_text(yaml.safe_dump(project, sort_keys=False))
    (tmp / f"Pulumi.{stack}.yaml").write_text((ROOT / f"Pulumi.{stack}.yaml").read_text())
    (tmp / "__main__.py").write_text(STANDIN_PROGRAM)
    kept = [
        {"type": r.type, "name": r.name, "inputs": r.inputs}
        for r in resources
        if r.type.startswith("kubernetes:")
    ]
    (tmp / "resources.json").write_text(json.dumps(kept))
    return tmp


def _preview_standin(
    tmp: Path, stack: str, resources: list[Registered], config: Mapping[str, Any] | None
) -> subprocess.CompletedProcess[str]:
    cli = _cli()
    work = _standin_dir(tmp / "project", stack, resources)
    env = {
        **os.environ,
        "PULUMI_BACKEND_URL": (tmp / "backend").as_uri(),
        "PULUMI_CONFIG_PASSPHRASE": PASSPHRASE,
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
        "PULUMI_HOME": str(tmp / "home"),
        "PATH": os.pathsep.join(
            [str(ROOT / ".venv-policy" / "bin"), str(TOOLS / "bin"), os.environ["PATH"]]
        ),
    }
    (tmp / "backend").mkdir(exist_ok=True)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [cli, *args, "--non-interactive", "--color", "never"],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )

    init = run("stack", "init", stack)
    assert init.returncode == 0, init.stderr
    args = ["preview", "--stack", stack, "--policy-pack", str(PACK)]
    if config:
        path = tmp / "policy-config.json"
        path.write_text(json.dumps({p: dict(config) for p in FACT_POLICIES}))
        args += ["--policy-pack-config", str(path)]
    return run(*args)


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[Registered]]:
    return {
        stack: [
            Registered(r["type"], r["name"], r["inputs"], "") for r in rendered_resources(stack)
        ]
        for stack in STACKS
    }


@pytest.mark.parametrize("stack", STACKS)
def test_committed_stack_passes_the_pack(
    stack: str, rendered: dict[str, list[Registered]], tmp_path: Path
) -> None:
    result = _preview_standin(tmp_path, stack, rendered[stack], None)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert PACK_NAME in output, f"the pack did not run: {output[-4000:]}"
    assert violations(output) == {}, output[-4000:]


CLI_VARIANTS = [v for v in VARIANTS if not v.offline_only]


@pytest.mark.parametrize("variant", CLI_VARIANTS, ids=[v.id for v in CLI_VARIANTS])
def test_violating_stack_fails_the_preview_with_the_policy_message(
    variant: Variant, rendered: dict[str, list[Registered]], tmp_path: Path
) -> None:
    resources = copy.deepcopy(rendered[variant.stack])
    variant.change(resources)
    result = _preview_standin(tmp_path, variant.stack, resources, variant.config)
    output = result.stdout + result.stderr
    assert result.returncode != 0, f"{variant.id}: preview passed: {output[-4000:]}"
    found = violations(output)
    assert set(found) == {variant.policy}, f"{variant.id}: {found}\n{output[-4000:]}"
    assert any(all(part in line for part in variant.expected) for line in found[variant.policy]), (
        f"{variant.id}: no message with {variant.expected}: {found[variant.policy]}"
    )


# --- this repository's program on the local cluster ---


def _configured(new_project: Callable[..., Project], stack: str, source: str) -> Project:
    project = new_project(stack, stack_file=source)
    # The prod example names its cluster by the context tfd-prod.
    kubeconfig = kubeconfig_with_context("tfd-prod") if source == "prod" else KUBECONFIG.read_text()
    project.set("kubeconfig", kubeconfig, secret=True)
    if source == "prod":
        # As in test_prod: no chart download, no registry here.
        project.set("grafanaAdminPassword", "policy-e2e-grafana", secret=True)
        project.set_many({"monitoringEnabled": False, "imageReference": PREBUILT})
    return project


@pytest.mark.parametrize("source", ["e2e", "prod"])
def test_program_preview_passes_the_pack(source: str, new_project: Callable[..., Project]) -> None:
    project = _configured(new_project, f"policy-{source}", source)
    run = project.preview(policy_packs=[str(PACK)])
    assert PACK_NAME in run.stdout, run.stdout[-4000:]
    assert violations(run.stdout) == {}, run.stdout[-4000:]


def test_program_preview_fails_the_pack_on_a_cloud_policy_config(
    new_project: Callable[..., Project], tmp_path: Path
) -> None:
    project = _configured(new_project, "policy-cloud", "e2e")
    config = tmp_path / "policy-config.json"
    config.write_text(json.dumps({"images-pinned": {"clusterKind": "cloud"}}))
    with pytest.raises(auto.CommandError) as failed:
        project.preview(policy_packs=[str(PACK)], policy_pack_configs=[str(config)])
    message = str(failed.value)
    assert "StatefulSet tfd-e2e/tfd-worker container 'trainer'" in message, message[-4000:]
    assert "is not pinned by digest on a cloud stack" in message, message[-4000:]
    assert set(violations(message)) == {"images-pinned"}, message[-4000:]


def workflow_preview_args(stack: str) -> list[str]:
    """The pull-request workflow's preview, as the CLI command its pulumi/actions step runs."""
    workflow = yaml.safe_load(WORKFLOW.read_text())
    steps = [
        step
        for job in workflow["jobs"].values()
        for step in job.get("steps", [])
        if str(step.get("uses", "")).startswith("pulumi/actions@")
    ]
    assert len(steps) == 1, f"{WORKFLOW}: expected one pulumi/actions step, found {len(steps)}"
    given = steps[0]["with"]
    assert given["command"] == "preview", given
    args = ["preview", "--stack", stack, "--non-interactive", "--policy-pack", given["policyPacks"]]
    if str(given.get("diff", "")).lower() == "true":
        args.append("--diff")
    return args


def test_the_workflow_preview_command_runs_on_the_e2e_stack(
    new_project: Callable[..., Project],
) -> None:
    """The CLI runs this repository's program itself (not inline), from the repository root,
    with the stack's settings from the test's project directory (``--config-file``)."""
    project = _configured(new_project, "policy-workflow", "e2e")
    args = workflow_preview_args(project.stack.name)
    env = {
        **os.environ,
        **project.env,
        # The language host runs the program with the python it finds first.
        "PATH": os.pathsep.join([str(ROOT / ".venv" / "bin"), project.env["PATH"]]),
    }
    result = subprocess.run(
        [
            str(TOOLS / "bin" / "pulumi"),
            *args,
            "--config-file",
            str(project.work / f"Pulumi.{project.stack.name}.yaml"),
            "--color",
            "never",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert PACK_NAME in output and violations(output) == {}, output[-4000:]
