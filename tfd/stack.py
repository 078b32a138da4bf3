"""The stack, through the Pulumi Automation API: a local workspace on the project directory,
so ``up`` runs the project's program through the Python language host exactly as ``pulumi up``
does (``Pulumi.yaml``'s runtime and virtualenv), with the stack's own settings file.

Nothing here shells out to the CLI by hand; the Automation API runs it. Secret config (the
kubeconfig) is read decrypted into memory to reach the cluster, and never printed.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infra.config import MINIKUBE_CONTEXT, PROJECT
from tfd.errors import StackError, UsageError, one_line
from tfd.kube import Access

ROOT = Path(__file__).resolve().parents[1]
"""The project directory (where ``Pulumi.yaml`` is): this checkout."""

PULUMI_MISSING = (
    "the Pulumi CLI (3.x) is needed and is not on PATH: install it with "
    "`curl -fsSL https://get.pulumi.com | sh` (then open a new shell, or add ~/.pulumi/bin to "
    "PATH); other ways: https://www.pulumi.com/docs/install/"
)
"""What tfd says without the CLI: how to get it, not only that it is missing."""


@dataclass(frozen=True)
class Target:
    """Where the stack's run lives on the cluster (its ``namespace`` and ``statefulset``
    outputs)."""

    namespace: str
    statefulset: str


def _fail(what: str, err: Exception) -> StackError:
    text = str(err)
    # The CLI's own error line is the useful part of a CommandError's multi-line text.
    for line in text.splitlines():
        if line.strip().startswith("error:"):
            text = line.strip()
            break
    return StackError(one_line(f"{what}: {text}"))


LIST_TRIES = 5
"""Tries of the backend's stack listing: a file backend lists a state file that an ``up`` is
renaming into place (``list bucket: ... .json.<n>.tmp: no such file``) now and then."""


def _list_stacks(workspace: Any) -> list[Any]:
    from pulumi import automation as auto

    for attempt in range(LIST_TRIES):
        try:
            return workspace.list_stacks()
        except auto.CommandError as err:
            if "list bucket" not in str(err) or attempt == LIST_TRIES - 1:
                raise
            time.sleep(0.2 * (attempt + 1))
    raise AssertionError("unreachable")


OUTPUT_READS = 3
"""Reads of the stack's outputs: the SDK reads them twice (masked, then in plaintext) and raises
``KeyError`` when an update wrote new ones in between, as a ``tfd status`` beside a stack's
first ``pulumi up`` saw (``KeyError: 'configHash'``, exit 70, in ``make e2e``)."""


class StackHandle:
    """One stack of the project, selected in a local workspace on ``project_dir``."""

    def __init__(self, stack: str | None, project_dir: Path = ROOT) -> None:
        from pulumi import automation as auto

        if not (project_dir / "Pulumi.yaml").is_file():
            raise UsageError(f"--project-dir: no Pulumi.yaml in {project_dir}")
        self.project_dir = project_dir
        try:
            workspace = auto.LocalWorkspace(work_dir=str(project_dir))
            stacks = _list_stacks(workspace)
            current = next((s.name for s in stacks if s.current), None)
            stack = stack or current
            if stack is None:
                raise UsageError("no stack selected: pass --stack NAME (or pulumi stack select)")
            if stack not in {s.name for s in stacks}:
                known = ", ".join(sorted(s.name for s in stacks)) or "none"
                raise UsageError(f"--stack: no stack {stack!r} in this project (stacks: {known})")
            self.stack = auto.Stack.select(stack, workspace)
            if current is not None and current != stack:
                # Selecting is the API's way to open a stack; the user's selection stays.
                workspace.select_stack(current)
        except auto.StackNotFoundError:
            raise UsageError(f"--stack: no stack {stack!r} in this project's backend") from None
        except auto.CommandError as err:
            raise _fail(f"stack {stack}", err) from None
        except FileNotFoundError:  # no pulumi CLI on PATH
            raise StackError(PULUMI_MISSING) from None
        self.name = stack
        self._config: dict[str, Any] | None = None

    def _run(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        from pulumi import automation as auto

        try:
            return fn(*args, **kwargs)
        except auto.CommandError as err:
            raise _fail(what, err) from None

    def config(self) -> dict[str, Any]:
        """``{fully qualified key: ConfigValue}`` of the stack (secrets decrypted, in memory)."""
        if self._config is None:
            self._config = self._run(f"stack {self.name}: read config", self.stack.get_all_config)
        return self._config

    def value(self, key: str) -> str:
        entry = self.config().get(f"{PROJECT}:{key}")
        return "" if entry is None else str(entry.value)

    def outputs(self) -> dict[str, Any]:
        for attempt in range(OUTPUT_READS):
            try:
                out = self._run(f"stack {self.name}: read outputs", self.stack.outputs)
            except KeyError:  # the SDK's two reads saw two sets (OUTPUT_READS)
                if attempt == OUTPUT_READS - 1:
                    raise
                time.sleep(0.2 * (attempt + 1))
                continue
            return {k: v.value for k, v in out.items()}
        raise AssertionError("unreachable")

    def target(self) -> Target:
        """The deployed names (outputs); before the first ``up`` has ended, the names the
        program gives the stack's config (its own rules, ``tfd.settings.validate``, less the
        image's: reading a run builds nothing).

        Raises:
            UsageError: no outputs and a config the program refuses.
        """
        out = self.outputs()
        if out.get("namespace") and out.get("statefulset"):
            return Target(str(out["namespace"]), str(out["statefulset"]))
        from tfd import settings

        raw, secret_keys = settings.merged(
            settings.project_values(self.project_dir), self.config(), {}
        )
        cfg = settings.validate(raw, secret_keys, stack=self.name, building=False)
        return Target(cfg.namespace, cfg.statefulset_name)

    def access(self) -> Access:
        """The cluster the stack's provider uses (``infra.cluster``): its kube context, and the
        secret kubeconfig when the stack holds one."""
        context = self.value("kubeContext") or None
        kubeconfig = self.value("kubeconfig") or None
        if context is None and kubeconfig is None and self.value("clusterKind") in ("", "minikube"):
            context = MINIKUBE_CONTEXT
        return Access(context, kubeconfig)

    def updating(self) -> bool:
        """Whether the backend shows an update of the stack in progress."""
        try:
            last = self.stack.history(page_size=1, show_secrets=False)
        except Exception:  # noqa: BLE001 - a backend without history: not known to be updating
            return False
        return bool(last) and last[0].result == "in-progress"

    def set_config(self, changes: Mapping[str, str | list[str]]) -> None:
        """``pulumi config set`` of each change (lists as ``key[i]`` paths, as the stack files
        hold arrays)."""
        from pulumi import automation as auto

        for key, value in changes.items():
            if isinstance(value, list):
                self._run(f"config rm {key}", self.stack.remove_config, key)
                for i, item in enumerate(value):
                    self._run(
                        f"config set {key}[{i}]",
                        self.stack.set_config,
                        f"{key}[{i}]",
                        auto.ConfigValue(value=item),
                        path=True,
                    )
            else:
                self._run(
                    f"config set {key}", self.stack.set_config, key, auto.ConfigValue(value=value)
                )
        self._config = None

    @property
    def settings_file(self) -> Path:
        """The stack's settings file, ``Pulumi.<stack>.yaml`` (the last part of a qualified
        name), which ``set_config`` writes and ``up`` reads."""
        return self.project_dir / f"Pulumi.{self.name.rsplit('/', 1)[-1]}.yaml"

    def saved_settings(self) -> bytes | None:
        """The settings file as it is now (``None``: there is none), for :meth:`restore`."""
        try:
            return self.settings_file.read_bytes()
        except FileNotFoundError:
            return None

    def restore(self, saved: bytes | None) -> None:
        """Put back the settings file :meth:`saved_settings` read, byte for byte (secrets stay
        the ciphertext they were): a submit whose update did not go through leaves the user's
        settings as they were."""
        if saved is None:
            self.settings_file.unlink(missing_ok=True)
        else:
            self.settings_file.write_bytes(saved)
        self._config = None

    def cancel_update(self) -> bool:
        """Ask the ``pulumi up`` this process runs to stop, as Ctrl-C asks it: the engine stops
        waiting for the provider (the workers' readiness) and records what exists, and ``up``
        ends with an error. ``True`` when there was one to ask. The Automation API runs the
        CLI as a child process and gives no handle on it, hence the process table (``psutil``);
        on Windows, where a console interrupt cannot be sent to one child, nothing is sent."""
        import psutil

        if os.name == "nt":
            return False
        asked = False
        for child in psutil.Process().children():
            try:
                if child.name() == "pulumi" and "up" in child.cmdline():
                    child.send_signal(signal.SIGINT)
                    asked = True
            except psutil.Error:  # ended meanwhile
                continue
        return asked

    def up(
        self, on_output: Callable[[str], None] | None, on_event: Callable[[Any], None] | None
    ) -> Any:
        """``pulumi up`` of the project's program; raises StackError with the engine's line."""
        return self._run(
            f"pulumi up --stack {self.name}",
            self.stack.up,
            on_output=on_output,
            on_event=on_event,
            color="never",
            show_secrets=False,
        )
