"""The real Pulumi engine and the local cluster, driven the way the e2e tests need them.

:class:`Project` runs this repository's ``__main__.py`` through the real ``pulumi`` CLI (built
by ``make tools``), the real Kubernetes provider plugin and a local file backend with the
passphrase secrets provider. The CLI talks to the program through the Python SDK's own language
runtime service (``pulumi.automation``'s inline programs, the CLI's ``--client`` flag): the
``pulumi-language-python`` plugin is not served by the Go module proxy, so it cannot be built
here. Everything the engine does (plan, diff, state, secrets, provider calls, awaits) is real.

:class:`Kube` reads and changes the cluster with the real ``kubectl`` and the admin kubeconfig
of ``make cluster-up``.
"""

from __future__ import annotations

import json
import os
import runpy
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping
from contextlib import chdir
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pulumi import automation as auto

from tools.training_impact import Impact, from_engine_events, impact

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / ".tools"
KUBECONFIG = TOOLS / "kubeconfig"
PROJECT = "tf-distributed"
PASSPHRASE = "e2e-only-passphrase"


def kubeconfig_with_context(name: str) -> str:
    """The cluster's kubeconfig with its context renamed ``name`` (the prod example names its
    cluster by the kube context ``tfd-prod``)."""
    config = json.loads(KUBECONFIG.read_text())
    old = config["current-context"]
    for context in config["contexts"]:
        if context["name"] == old:
            context["name"] = name
    config["current-context"] = name
    return json.dumps(config)


def run_program() -> None:
    """The inline program: this repository's ``__main__.py``, exactly as ``pulumi up`` runs it
    (from the project directory, as ``__main__``)."""
    with chdir(ROOT):
        runpy.run_path(str(ROOT / "__main__.py"), run_name="__main__")


class Kube:
    """``kubectl`` against the local cluster."""

    def __init__(self, kubeconfig: Path = KUBECONFIG) -> None:
        self.kubeconfig = kubeconfig
        self.kubectl = str(TOOLS / "bin" / "kubectl")

    def run(self, *args: str, stdin: str | None = None, check: bool = True) -> str:
        result = subprocess.run(
            [self.kubectl, "--kubeconfig", str(self.kubeconfig), *args],
            input=stdin,
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
        return result.stdout if result.returncode == 0 else result.stderr

    def can_i(self, *args: str) -> bool:
        """``kubectl auth can-i <args>``: True for "yes", False for "no"; anything else (an
        error, an unknown resource) fails."""
        result = subprocess.run(
            [self.kubectl, "--kubeconfig", str(self.kubeconfig), "auth", "can-i", *args],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        answer = (result.returncode, result.stdout.strip())
        if answer not in ((0, "yes"), (1, "no")):
            raise AssertionError(f"kubectl auth can-i {' '.join(args)}: {answer} {result.stderr}")
        return answer == (0, "yes")

    def get(self, kind: str, name: str | None = None, namespace: str | None = None) -> Any:
        """The object (or the list when ``name`` is ``None``) as JSON; ``None`` if not found."""
        args = ["get", kind, *([name] if name else []), "-o", "json"]
        if namespace:
            args += ["-n", namespace]
        result = subprocess.run(
            [self.kubectl, "--kubeconfig", str(self.kubeconfig), *args],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        if result.returncode != 0:
            if "NotFound" in result.stderr or "not found" in result.stderr:
                return None
            raise AssertionError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
        return json.loads(result.stdout)

    def items(self, kind: str, namespace: str, selector: str | None = None) -> list[dict]:
        args = ["get", kind, "-n", namespace, "-o", "json"]
        if selector:
            args += ["-l", selector]
        return json.loads(self.run(*args))["items"]

    def ready_replicas(self, statefulset: str, namespace: str) -> int | None:
        """``status.readyReplicas`` of a StatefulSet (``None`` when it does not exist)."""
        live = self.get("statefulset.apps", statefulset, namespace)
        return None if live is None else live["status"].get("readyReplicas", 0)

    def observed_statefulset(self, name: str, namespace: str, timeout: float = 120) -> dict:
        """The StatefulSet once its controller has seen its current spec (``observedGeneration``
        at ``generation``): only then is its status (``updateRevision``, the pods it made) of that
        spec. ``pulumi up`` does not wait for it on an ``OnDelete`` update (the provider checks
        the replica counts only, which the earlier spec's pods already meet)."""

        def probe() -> dict | None:
            live = self.get("statefulset.apps", name, namespace)
            if live is None:
                return None
            observed = (live.get("status") or {}).get("observedGeneration", 0)
            return live if observed >= live["metadata"]["generation"] else None

        return self.wait_for(f"StatefulSet {namespace}/{name} observed", probe, timeout)

    def wait_for(
        self, what: str, probe: Callable[[], Any], timeout: float = 120, every: float = 1
    ) -> Any:
        """Poll ``probe`` until it returns something truthy; fail naming ``what``."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            last = probe()
            if last:
                return last
            time.sleep(every)
        raise AssertionError(f"{what}: not true after {timeout:.0f} s (last: {last!r})")


@dataclass
class Step:
    """One resource step of an engine run (the CLI's ``--json`` steps, as engine events)."""

    op: str
    urn: str
    type: str
    diffs: list[str] = field(default_factory=list)
    # property path -> "add" | "update" | "delete" | ..., as `pulumi preview --diff` shows it.
    detailed_diff: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.urn.rsplit("::", 1)[-1]


@dataclass
class Run:
    """What one preview/up/refresh/destroy did."""

    steps: list[Step]
    stdout: str
    stderr: str
    seconds: float
    # What the run does to a running training (tools/training_impact.py), from its events.
    impact: Impact = Impact.NONE

    def changed(self) -> list[Step]:
        """Steps that change something (everything but ``same`` and reads)."""
        return [s for s in self.steps if s.op not in ("same", "read", "refresh")]


class Project:
    """One stack of this project in a temporary Pulumi project directory and file backend.

    The directory holds copies of ``Pulumi.yaml`` and ``Pulumi.<stack_file>.yaml`` (the stack's
    settings as committed), so nothing in the repository is written by a test.
    """

    def __init__(
        self,
        work: Path,
        stack: str,
        *,
        stack_file: str | None = None,
        backend: Path,
        pulumi_home: Path = TOOLS / "pulumi-home",
    ) -> None:
        work.mkdir(parents=True, exist_ok=True)
        backend.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / "Pulumi.yaml", work / "Pulumi.yaml")
        source = ROOT / f"Pulumi.{stack_file or stack}.yaml"
        if source.exists():
            shutil.copy(source, work / f"Pulumi.{stack}.yaml")
        self.work = work
        self.env = {
            "PULUMI_BACKEND_URL": backend.as_uri(),
            "PULUMI_CONFIG_PASSPHRASE": PASSPHRASE,
            "PULUMI_SKIP_UPDATE_CHECK": "true",
            # The engine must never download a plugin: the provider is registered offline.
            "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
            "PULUMI_HOME": str(pulumi_home),
            "PATH": f"{TOOLS / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        }
        command = auto.PulumiCommand(root=str(TOOLS))
        self.stack = auto.create_or_select_stack(
            stack,
            project_name=PROJECT,
            program=run_program,
            opts=auto.LocalWorkspaceOptions(
                work_dir=str(work),
                pulumi_home=str(pulumi_home),
                env_vars=self.env,
                secrets_provider="passphrase",
                pulumi_command=command,
            ),
        )

    # --- configuration ---

    def set(self, key: str, value: Any, *, secret: bool = False) -> None:
        """``pulumi config set [--secret] [--path] tf-distributed:<key> <value>``.

        Lists are stored as YAML arrays (``--path key[i]``), which the CLI hands to the program
        as JSON, like the arrays of the committed stack files.
        """
        full = f"{PROJECT}:{key}"
        if isinstance(value, list):
            self.stack.remove_config(full)
            for i, item in enumerate(value):
                self.stack.set_config(f"{full}[{i}]", auto.ConfigValue(value=str(item)), path=True)
            return
        text = ("true" if value else "false") if isinstance(value, bool) else str(value)
        self.stack.set_config(full, auto.ConfigValue(value=text, secret=secret))

    def set_many(self, values: Mapping[str, Any]) -> None:
        for key, value in values.items():
            self.set(key, value)

    # --- operations ---

    def _run(self, operation: str, **kwargs: Any) -> Run:
        events: list[auto.EngineEvent] = []
        started = time.monotonic()
        result = getattr(self.stack, operation)(on_event=events.append, color="never", **kwargs)
        steps = []
        for event in events:
            pre = event.resource_pre_event
            if pre is None:
                continue
            meta = pre.metadata
            steps.append(
                Step(
                    op=str(meta.op.value if hasattr(meta.op, "value") else meta.op),
                    urn=meta.urn,
                    type=meta.type,
                    diffs=list(meta.diffs or []),
                    detailed_diff={
                        path: diff.diff_kind.value
                        for path, diff in (meta.detailed_diff or {}).items()
                    },
                )
            )
        return Run(
            steps=steps,
            stdout=result.stdout,
            stderr=result.stderr,
            seconds=time.monotonic() - started,
            impact=impact(from_engine_events(events)),
        )

    def preview(self, **kwargs: Any) -> Run:
        return self._run("preview", diff=True, **kwargs)

    def up(self, **kwargs: Any) -> Run:
        return self._run("up", **kwargs)

    def refresh(self, **kwargs: Any) -> Run:
        return self._run("refresh", **kwargs)

    def destroy(self, **kwargs: Any) -> Run:
        return self._run("destroy", **kwargs)

    def outputs(self) -> dict[str, auto.OutputValue]:
        return self.stack.outputs()

    def cli(self, *args: str) -> str:
        """Run ``pulumi <args> --stack <stack>`` in the project directory; its stdout."""
        result = subprocess.run(
            [str(TOOLS / "bin" / "pulumi"), *args, "--stack", self.stack.name],
            cwd=self.work,
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        assert result.returncode == 0, f"pulumi {' '.join(args)}: {result.stderr}"
        return result.stdout

    def export_text(self) -> str:
        """``pulumi stack export``: the state as the backend holds it (secrets encrypted)."""
        return self.cli("stack", "export")

    def stack_file_text(self) -> str:
        return (self.work / f"Pulumi.{self.stack.name}.yaml").read_text()
