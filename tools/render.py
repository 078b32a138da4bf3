"""Render a stack offline: run the real program under Pulumi's mocks, write what it would apply.

    python -m tools.render --stack dev --out out/dev

No Pulumi CLI, no cluster, no Docker daemon. The stack's configuration is what the CLI would
give the program: the ``Pulumi.yaml`` defaults overlaid with ``Pulumi.<stack>.yaml``. Secret
(``secure:``) values cannot be decrypted here; they become the placeholder :data:`SECRET_TEXT`
and stay marked secret, and every secret that reaches a resource is written as that placeholder.

Output layout::

    DIR/manifests/<kind>-[<namespace>-]<name>.yaml   one Kubernetes object per file
    DIR/pulumi/<type>-<name>.yaml                     provider, Helm release, image build
    DIR/pulumi/stack-outputs.yaml                     the stack outputs

Validators (kubernetes-validate, checkov) read ``DIR/manifests`` only. Numbers are written as
integers where the value is whole (the mocks see every number as a float).

Only public Pulumi SDK API drives the run (``reset_options``, ``set_all_config``, ``set_mocks``,
``test``); the private pieces it still needs are in :mod:`tools.pulumi_private`, with reasons.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import runpy
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
import yaml
from pulumi.runtime import rpc

from infra.config import PROJECT, project_declarations, to_config_text
from infra.image_mock import mock_image_outputs
from tools import pulumi_private
from tools.pulumi_private import ROOT_STACK_TYPE

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = ROOT / "__main__.py"
STACKS = ("dev", "prod", "gke", "eks", "aks")
"""The example stacks users copy (``e2e`` is the e2e run's own)."""
USER_SECRETS: dict[str, tuple[str, ...]] = dict.fromkeys(
    ("prod", "gke", "eks", "aks"), ("grafanaAdminPassword",)
)
"""Secrets an example stack's users set themselves (its stack file says how: a ciphertext only
their secrets provider can decrypt cannot ship in the file); rendered as set, with the
placeholder :data:`SECRET_TEXT`, unless the stack file or an override sets them."""
SECRET_TEXT = "[secret]"
MOCK_DOCKER_HOST = "unix:///var/run/docker.sock"
"""``DOCKER_HOST`` while rendering when the shell has none (nothing is built under mocks)."""
_SAFE = re.compile(r"[^a-z0-9.-]+")


class RenderError(RuntimeError):
    """The stack file is missing or malformed."""


@dataclass(frozen=True)
class Registered:
    """One resource the program registered, as the engine would receive it.

    Attributes:
        type: Pulumi type token, e.g. ``kubernetes:apps/v1:StatefulSet``.
        name: Pulumi logical name.
        inputs: the inputs, secrets replaced by :data:`SECRET_TEXT`, whole floats as ints.
        provider: provider reference (``<urn>::<id>``), empty for components and providers.
        ignore_changes: the resource option ``ignore_changes``.
        retain_on_delete: the resource option ``retain_on_delete``.
        dependencies: URNs of the resources it waits for (``depends_on``, expanded).
        replace_on_changes, delete_before_replace: those resource options.
        custom_timeouts: ``{"create": ..., "update": ..., "delete": ...}``, the set ones only.
        urn: the resource's URN (what ``pulumi import --parent``/``--provider`` and
            ``--exclude`` name).
    """

    type: str
    name: str
    inputs: dict[str, Any]
    provider: str
    ignore_changes: tuple[str, ...] = ()
    retain_on_delete: bool = False
    dependencies: tuple[str, ...] = ()
    replace_on_changes: tuple[str, ...] = ()
    delete_before_replace: bool = False
    custom_timeouts: dict[str, str] = field(default_factory=dict)
    urn: str = ""

    @property
    def is_manifest(self) -> bool:
        """A whole Kubernetes object (a ``...Patch`` resource holds only some of its fields)."""
        return (
            "apiVersion" in self.inputs
            and "kind" in self.inputs
            and not self.type.endswith("Patch")
        )

    @property
    def kind(self) -> str:
        return str(self.inputs.get("kind", ""))

    @property
    def metadata(self) -> dict[str, Any]:
        return self.inputs.get("metadata") or {}

    def file_name(self) -> str:
        if self.is_manifest:
            parts = [self.kind, self.metadata.get("namespace", ""), self.metadata.get("name", "")]
        else:
            parts = [self.type.split(":")[-1], self.name]
        return "-".join(_SAFE.sub("-", p.lower()) for p in parts if p) + ".yaml"


@dataclass
class Rendered:
    """Everything one program run registered, in registration order."""

    stack: str
    resources: list[Registered] = field(default_factory=list)
    outputs: dict[str, Any] = field(default_factory=dict)

    @property
    def manifests(self) -> list[dict[str, Any]]:
        return [r.inputs for r in self.resources if r.is_manifest]

    def by_kind(self, kind: str) -> list[dict[str, Any]]:
        return [m for m in self.manifests if m["kind"] == kind]

    def one(self, kind: str) -> dict[str, Any]:
        found = self.by_kind(kind)
        if len(found) != 1:
            raise LookupError(f"stack {self.stack}: expected one {kind}, found {len(found)}")
        return found[0]


def _redact(value: Any) -> Any:
    """Every leaf becomes the placeholder; the shape (mapping keys, list length) stays, so a
    redacted manifest still validates."""
    if isinstance(value, dict):
        return {k: _redact(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact(v) for v in value]
    return SECRET_TEXT


def clean(value: Any) -> Any:
    """Redact secrets and turn whole floats back into integers, recursively."""
    if isinstance(value, dict):
        if rpc.is_rpc_secret(value):
            return _redact(rpc.unwrap_rpc_secret(value))
        return {k: clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clean(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _load_yaml(path: Path) -> Any:
    """A YAML file's contents; a syntax error is a one-line :class:`RenderError` naming the file,
    line and column (PyYAML's own message spans several lines and a traceback)."""
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise RenderError(f"{path.name}: not valid YAML{where}: {problem}") from None


def stack_config(
    stack: str, overrides: Mapping[str, Any] | None = None, root: Path = ROOT
) -> tuple[dict[str, str], list[str]]:
    """The flat config the CLI would give the program, and its secret keys.

    Layers, last wins: ``Pulumi.yaml`` defaults and other-namespace values, the stack file,
    ``overrides``.

    Args:
        stack: stack name; reads ``Pulumi.<stack>.yaml`` next to ``Pulumi.yaml``.
        overrides: fully qualified keys to typed values applied last (tests); a value of
            ``{"secure": ...}`` is a secret, ``None`` removes the key.

    Raises:
        RenderError: the stack file is missing, is not valid YAML or has no ``config`` mapping.
    """
    path = root / f"Pulumi.{stack}.yaml"
    if not path.is_file():
        raise RenderError(f"--stack: no stack file {path.name} in {root}; got {stack!r}")
    doc = _load_yaml(path) or {}
    if not isinstance(doc, dict) or not isinstance(doc.get("config", {}), dict):
        got = doc.get("config") if isinstance(doc, dict) else doc
        raise RenderError(f"{path.name}: 'config' must be a mapping; got {got!r}")

    project_doc = _load_yaml(root / "Pulumi.yaml")  # before the declarations: one-line errors
    typed: dict[str, Any] = {
        f"{PROJECT}:{d.key}": d.default
        for d in project_declarations(root / "Pulumi.yaml").values()
        if d.default is not None
    }
    for key, spec in (project_doc.get("config") or {}).items():
        # Values for other namespaces (``pulumi:``, providers) set for every stack.
        if ":" in key and not key.startswith(f"{PROJECT}:"):
            typed[key] = spec["value"] if isinstance(spec, dict) and "value" in spec else spec
    for key, value in (doc.get("config") or {}).items():
        typed[key if ":" in key else f"{PROJECT}:{key}"] = value
    for key in USER_SECRETS.get(stack, ()):
        if typed.get(f"{PROJECT}:{key}") in (None, ""):
            typed[f"{PROJECT}:{key}"] = {"secure": "set by the stack's user"}
    for key, value in (overrides or {}).items():
        if value is None:
            typed.pop(key, None)
        else:
            typed[key] = value

    values: dict[str, str] = {}
    secret: list[str] = []
    for key, value in typed.items():
        if isinstance(value, dict) and set(value) == {"secure"}:
            # The ciphertext cannot be decrypted offline: a placeholder, still secret.
            values[key] = SECRET_TEXT
            secret.append(key)
        else:
            values[key] = to_config_text(value)
    return values, secret


class Recorder(pulumi.runtime.Mocks):
    """Mocks that record every registered resource (and fake the image build)."""

    def __init__(self) -> None:
        self.resources: list[Registered] = []
        # Resource options the engine would see (Registered's keyword arguments), by
        # (type, name); filled by pulumi_private.OptionsMonitor.
        self.options: dict[tuple[str, str], dict[str, Any]] = {}

    def record_options(self, typ: str, name: str, options: dict[str, Any]) -> None:
        self.options[(typ, name)] = options

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict]:
        options = self.options.get((args.typ, args.name), {})
        self.resources.append(
            Registered(args.typ, args.name, clean(args.inputs), args.provider or "", **options)
        )
        outputs = dict(args.inputs)
        if args.typ.startswith("docker"):
            outputs = mock_image_outputs(args.typ, args.inputs)
        return f"{args.name}-id", outputs

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict, list | None]:
        return {}, None


@contextlib.contextmanager
def _docker_host_for_mocks() -> Iterator[None]:
    """A ``DOCKER_HOST`` while the program runs under mocks, where no image is ever built.

    minikube stacks that build their image refuse to run without a Docker host (see
    ``infra.config.parse_config``); the renderer only records what would be registered.
    """
    if os.environ.get("DOCKER_HOST"):
        yield
        return
    os.environ["DOCKER_HOST"] = MOCK_DOCKER_HOST
    try:
        yield
    finally:
        os.environ.pop("DOCKER_HOST", None)


def render_stack(
    stack: str, overrides: Mapping[str, Any] | None = None, recorder: Recorder | None = None
) -> Rendered:
    """Run ``__main__.py`` under mocks with ``stack``'s config; return what it registered.

    Args:
        stack: stack name (``Pulumi.<stack>.yaml``).
        overrides: see :func:`stack_config`.
        recorder: records registrations; pass one to inspect them when the run raises.

    Raises:
        RenderError: see :func:`stack_config`.
        infra.config.ConfigError: the configuration is invalid (nothing was registered).
    """
    values, secret_keys = stack_config(stack, overrides)
    recorder = recorder if recorder is not None else Recorder()
    # A fresh root Stack for every run in this process (set_mocks makes one when there is none);
    # pulumi.runtime.test clears the RPC bookkeeping of earlier runs.
    pulumi.runtime.reset_options(project=PROJECT, stack=stack, preview=False)
    pulumi.runtime.set_all_config(values, secret_keys)
    pulumi.runtime.set_mocks(
        recorder,
        project=PROJECT,
        stack=stack,
        preview=False,
        monitor=pulumi_private.OptionsMonitor(recorder, recorder.record_options),
    )
    root = pulumi.runtime.get_root_resource()
    outputs: dict[str, Any] = {}

    def program() -> pulumi.Output[None]:
        runpy.run_path(str(PROGRAM), run_name="__main__")
        exported = pulumi_private.stack_outputs(root)
        return pulumi.Output.from_input(exported).apply(lambda v: outputs.update(v or {}))

    # The program builds paths relative to the project directory, as under `pulumi up`.
    with contextlib.chdir(ROOT), _docker_host_for_mocks():
        pulumi.runtime.test(program)()
    resources = [r for r in recorder.resources if r.type != ROOT_STACK_TYPE]
    return Rendered(stack=stack, resources=resources, outputs=clean(outputs))


_FIRST = ("apiVersion", "kind", "metadata", "type", "name")


def _sorted(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _sorted(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted(v) for v in value]
    return value


def _dump(path: Path, doc: dict[str, Any]) -> None:
    """YAML with ``apiVersion``/``kind``/``metadata`` first and the rest in key order."""
    ordered = {k: _sorted(doc[k]) for k in _FIRST if k in doc}
    ordered.update({k: _sorted(doc[k]) for k in sorted(doc) if k not in ordered})
    path.write_text(yaml.safe_dump(ordered, sort_keys=False, default_flow_style=False), "utf-8")


def write_rendered(rendered: Rendered, out: Path) -> list[Path]:
    """Write manifests and non-manifest records under ``out``; returns the manifest files."""
    manifests_dir, pulumi_dir = out / "manifests", out / "pulumi"
    for directory in (manifests_dir, pulumi_dir):
        directory.mkdir(parents=True, exist_ok=True)
        for old in directory.glob("*.yaml"):
            old.unlink()
    written = []
    for res in rendered.resources:
        if res.is_manifest:
            path = manifests_dir / res.file_name()
            if path.exists():
                raise RenderError(f"two manifests would both be written to {path}")
            _dump(path, res.inputs)
            written.append(path)
        elif not res.type.startswith("tfd:"):
            _dump(
                pulumi_dir / res.file_name(),
                {"type": res.type, "name": res.name, "inputs": res.inputs},
            )
    _dump(pulumi_dir / "stack-outputs.yaml", rendered.outputs)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.render",
        description="Write every Kubernetes manifest a stack would apply (Pulumi mocks, offline).",
    )
    parser.add_argument("--stack", required=True, help=f"stack name, e.g. {' or '.join(STACKS)}")
    parser.add_argument("--out", required=True, type=Path, help="output directory")
    args = parser.parse_args(argv)
    try:
        rendered = render_stack(args.stack)
    except (RenderError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    files = write_rendered(rendered, args.out)
    print(f"{args.stack}: {len(files)} manifests in {args.out / 'manifests'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
