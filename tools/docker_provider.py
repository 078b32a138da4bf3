"""A test-only stand-in of pulumi-docker's resource plugin: ``docker:index/image:Image`` by the
Docker CLI, registered as the ``docker`` plugin at the version the Python SDK asks for.

The real provider cannot be built here (its Go modules are not served; docs/e2e.md). This one
speaks the same resource contract the program uses, on Pulumi's provider SDK: ``check`` puts
the build context's digest into the inputs (so a changed file shows in ``pulumi preview``),
``create``/``update`` run a real ``docker build`` (and, unless ``skipPush``, a real
``docker push`` with the registry block's credentials), and the outputs are pulumi-docker's:
``repoDigest`` is ``<repo>@sha256:<manifest digest>`` after a push, the image ID for a local
build. It proves the program's contract with the resource, not pulumi-docker's own code.

Run by the engine as ``pulumi-resource-docker`` (a script :func:`install` writes).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pulumi.provider.experimental.provider as p
from pulumi.provider.experimental.property_value import PropertyValue
from pulumi.provider.experimental.server import main
from pulumi.runtime import rpc

from infra.image_mock import repository

IMAGE = "docker:index/image:Image"
BUILD_TIMEOUT_S = 1800
ROOT = Path(__file__).resolve().parent.parent
PROGRAM_DIR_ENV = "TFD_STAND_IN_PROGRAM_DIR"
"""Where relative build paths start (default: the plugin's working directory, the project
directory under ``pulumi up``). The e2e harness runs the CLI in a copy of the project and the
inline program in the repository, so it names the repository here."""


def sdk_version() -> str:
    """The plugin version the installed ``pulumi_docker`` SDK requests."""
    import pulumi_docker

    return json.loads((Path(pulumi_docker.__file__).parent / "pulumi-plugin.json").read_text())[
        "version"
    ]


def plain(value: PropertyValue) -> Any:
    """A property value as plain Python (maps, lists, scalars; :class:`Computed` stays)."""
    v = value.value
    if isinstance(v, Mapping):
        return {k: plain(item) for k, item in v.items()}
    if isinstance(v, tuple):
        return [plain(item) for item in v]
    return v


def wrap(value: Any) -> PropertyValue:
    if isinstance(value, PropertyValue):
        return value
    if isinstance(value, Mapping):
        return PropertyValue({k: wrap(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return PropertyValue([wrap(v) for v in value])
    if isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    return PropertyValue(value)


def context_digest(context: Path, dockerfile: Path) -> str:
    """sha256 of what ``docker build`` sends: each file its ``.dockerignore`` lets in (docker-py's
    own implementation of its rules), by path and content, plus the Dockerfile."""
    from docker.utils.build import exclude_paths

    ignore = context / ".dockerignore"
    patterns = []
    if ignore.exists():
        patterns = [
            line.strip()
            for line in ignore.read_text().splitlines()
            if line.strip() and not line.startswith("#")
        ]
    digest = hashlib.sha256()
    for rel in sorted(exclude_paths(str(context), patterns)):
        path = context / rel
        if path.is_file():
            digest.update(rel.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    digest.update(b"Dockerfile\0" + hashlib.sha256(dockerfile.read_bytes()).digest())
    return f"sha256:{digest.hexdigest()}"


class DockerError(RuntimeError):
    """A docker command failed: its last output lines say why."""


class StandInDocker(p.Provider):
    """The Image resource over the ``docker`` CLI, against the provider's ``host``."""

    def __init__(self) -> None:
        self.env = dict(os.environ)
        os.chdir(os.environ.get(PROGRAM_DIR_ENV) or os.getcwd())

    async def configure(self, request: p.ConfigureRequest) -> p.ConfigureResponse:
        args = {k: plain(v) for k, v in request.args.items()}
        if isinstance(args.get("host"), str) and args["host"]:
            self.env["DOCKER_HOST"] = args["host"]
        if isinstance(args.get("certPath"), str) and args["certPath"]:
            self.env.update(DOCKER_CERT_PATH=args["certPath"], DOCKER_TLS_VERIFY="1")
        return p.ConfigureResponse(accept_secrets=True, supports_preview=True)

    def _docker(self, *args: str, env: Mapping[str, str] | None = None, stdin: str = "") -> str:
        done = subprocess.run(
            ["docker", *args],
            input=stdin,
            capture_output=True,
            text=True,
            env={**self.env, **(env or {})},
            timeout=BUILD_TIMEOUT_S,
        )
        if done.returncode != 0:
            tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
            raise DockerError(f"docker {args[0]} failed (exit {done.returncode}): {tail}")
        return done.stdout.strip()

    async def check(self, request: p.CheckRequest) -> p.CheckResponse:
        news = dict(request.new_inputs)
        build = plain(news["build"]) if "build" in news else {}
        context = build.get("context")
        if not isinstance(context, str):  # unknown during a preview: nothing to hash yet
            return p.CheckResponse(inputs=news)
        dockerfile = Path(build.get("dockerfile") or Path(context) / "Dockerfile")
        fields = dict(news["build"].value)
        fields["contextDigest"] = PropertyValue(context_digest(Path(context), dockerfile))
        news["build"] = PropertyValue(fields)
        return p.CheckResponse(inputs=news)

    async def diff(self, request: p.DiffRequest) -> p.DiffResponse:
        # The state never holds the registry block (its password): its server is compared
        # through the ``registryServer`` output; a new password alone rebuilds nothing.
        old = {k: plain(v) for k, v in request.old_state.items()}
        new = {k: plain(v) for k, v in request.new_inputs.items()}
        new["registryServer"] = (new.get("registry") or {}).get("server") or ""
        changed = [
            "registry" if key == "registryServer" else key
            for key in ("imageName", "build", "skipPush", "registryServer")
            if old.get(key) != new.get(key)
        ]
        return p.DiffResponse(
            changes=bool(changed),
            diffs=changed,
            detailed_diff={
                k: p.PropertyDiff(p.PropertyDiffKind.UPDATE, input_diff=True) for k in changed
            },
        )

    def _outputs(self, inputs: Mapping[str, PropertyValue], preview: bool) -> dict:
        args = {k: plain(v) for k, v in inputs.items()}
        build, name = args.get("build") or {}, args["imageName"]
        registry = args.get("registry") or {}
        out = {
            k: v for k, v in inputs.items() if k != "registry"
        }  # the registry block holds the password: never an output
        out.update(
            imageName=wrap(name),
            baseImageName=wrap(name),
            registryServer=wrap(registry.get("server") or ""),
            context=wrap(build.get("context", ".")),
            dockerfile=wrap(build.get("dockerfile", "Dockerfile")),
            platform=wrap(build.get("platform")),
        )
        if preview:
            # The wire form of an unknown (the SDK's marshal has none for ``Computed``).
            out["repoDigest"] = PropertyValue(rpc.UNKNOWN)
            return out
        out["repoDigest"] = wrap(self._build(name, build, registry, push=not args.get("skipPush")))
        return out

    def _build(self, name: str, build: dict, registry: dict, *, push: bool) -> str:
        command = ["build", "--tag", name, "--file", build.get("dockerfile") or "Dockerfile"]
        # The e2e daemon has no bridge network (docs/e2e.md): builds use the host's.
        command += ["--network", build.get("network") or "host"]
        if build.get("platform"):
            command += ["--platform", build["platform"]]
        for key, value in sorted((build.get("args") or {}).items()):
            command += ["--build-arg", f"{key}={value}"]
        # The classic builder: Debian's Docker here has no buildx for BuildKit.
        self._docker(*command, build["context"], env={"DOCKER_BUILDKIT": "0"})
        if not push:
            return self._docker("image", "inspect", "--format", "{{.Id}}", name)
        with tempfile.TemporaryDirectory(prefix="tfd-docker-config-") as config:
            env = {"DOCKER_CONFIG": config}
            if registry.get("username"):
                self._docker(
                    "login", "--username", registry["username"], "--password-stdin",
                    registry["server"], env=env, stdin=str(registry.get("password") or ""),
                )  # fmt: skip
            self._docker("push", name, env=env)
        digests = json.loads(
            self._docker("image", "inspect", "--format", "{{json .RepoDigests}}", name)
        )
        repo = repository(name)
        for ref in digests or []:
            if ref.startswith(f"{repo}@"):
                return ref
        raise DockerError(f"docker push of {name}: no digest of {repo} among {digests}")

    async def create(self, request: p.CreateRequest) -> p.CreateResponse:
        out = self._outputs(request.properties, request.preview)
        return p.CreateResponse(resource_id=plain(request.properties["imageName"]), properties=out)

    async def update(self, request: p.UpdateRequest) -> p.UpdateResponse:
        return p.UpdateResponse(properties=self._outputs(request.news, request.preview))

    async def delete(self, request: p.DeleteRequest) -> None:
        # As pulumi-docker: the pushed image stays in its registry; the local one in the daemon.
        return None


def install(pulumi: Path, home: Path) -> None:
    """Register this stand-in as the ``docker`` plugin of ``home`` (``PULUMI_HOME``)."""
    script = home / "docker-stand-in" / "pulumi-resource-docker"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(
        f'#!/bin/sh\nPYTHONPATH="{ROOT}" exec "{sys.executable}" -m tools.docker_provider "$@"\n'
    )
    script.chmod(0o755)
    subprocess.run(
        [str(pulumi), "plugin", "install", "resource", "docker", sdk_version(),
         "--file", str(script), "--reinstall"],
        check=True, env={**os.environ, "PULUMI_HOME": str(home), "PULUMI_SKIP_UPDATE_CHECK": "1"},
    )  # fmt: skip


if __name__ == "__main__":
    if sys.argv[1:2] == ["install"]:
        install(Path(sys.argv[2]), Path(sys.argv[3]))
    else:
        main(sys.argv[1:], sdk_version(), StandInDocker())
