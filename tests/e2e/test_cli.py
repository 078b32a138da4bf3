"""The stack deployed the way a user deploys it: ``pulumi up``, ``pulumi up`` after a config
change, and ``pulumi destroy``, each run by the real CLI in the project's directory, which starts
the Python language host (``pulumi-language-python`` from ``make tools``) and the program in
``.venv`` itself. The other engine scenarios run the program inline through the Automation API.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable

from tests.e2e.harness import KUBECONFIG, ROOT, TOOLS, Kube, Project

NAMESPACE = "tfd-cli"
STATEFULSET = "tfd-worker"


def pulumi(project: Project, *args: str) -> str:
    """``pulumi <args>`` in the repository (the project directory), the stack's settings from
    the test's copy of its file; fails the test with the CLI's output on a non-zero exit."""
    result = subprocess.run(
        [
            str(TOOLS / "bin" / "pulumi"), *args,
            "--stack", project.stack.name,
            "--config-file", str(project.work / f"Pulumi.{project.stack.name}.yaml"),
            "--non-interactive", "--color", "never",
        ],
        cwd=ROOT,
        # The language host runs the program with the python it finds first: the project's venv.
        env={
            **os.environ,
            **project.env,
            "PATH": os.pathsep.join([str(ROOT / ".venv" / "bin"), project.env["PATH"]]),
        },
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, (
        f"pulumi {' '.join(args)} exited {result.returncode}:\n{output[-4000:]}"
    )
    return output


def epochs_arg(kube: Kube) -> str:
    live = kube.get("statefulset.apps", STATEFULSET, NAMESPACE)
    args = live["spec"]["template"]["spec"]["containers"][0]["args"]
    return args[args.index("--epochs") + 1]


def test_up_update_and_destroy_by_the_cli(new_project: Callable[..., Project], kube: Kube) -> None:
    project = new_project("cli", stack_file="e2e")
    project.set("kubeconfig", KUBECONFIG.read_text(), secret=True)
    project.set_many({"namespace": NAMESPACE, "checkpointRetention": "Delete", "epochs": 3})

    out = pulumi(project, "up", "--yes", "--skip-preview")
    assert " created" in out, out[-4000:]
    assert epochs_arg(kube) == "3"
    kube.wait_for("2 ready workers", lambda: kube.ready_replicas(STATEFULSET, NAMESPACE) == 2)

    project.set("epochs", 5)
    out = pulumi(project, "up", "--yes", "--skip-preview")
    assert "1 updated" in out, out[-4000:]
    assert epochs_arg(kube) == "5"

    pulumi(project, "destroy", "--yes", "--skip-preview")
    assert kube.get("statefulset.apps", STATEFULSET, NAMESPACE) is None
    kube.wait_for("namespace deleted", lambda: kube.get("namespace", NAMESPACE) is None, 180)
