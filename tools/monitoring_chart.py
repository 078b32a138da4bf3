"""kube-prometheus-stack for the e2e suite: the released chart, from the Go module proxy, served
as a Helm repository on loopback (``make tools`` packages it, the e2e fixture serves it).

Helm chart repositories cannot be reached from this project's machines, but the Go module proxy
serves snapshots of ``github.com/prometheus-community/helm-charts`` (the chart sources, with
kube-prometheus-stack's sibling charts at the versions it depends on). ``tools/versions.env``
pins one snapshot and its ``h1:`` sum. :func:`package` turns it into what ``helm package`` plus
``helm repo index`` would publish: ``kube-prometheus-stack-<version>.tgz`` (the chart's files
without those its ``.helmignore`` names, each dependency under ``charts/``) and ``index.yaml``.

Every dependency of the chart's ``Chart.yaml`` must be under ``charts/``, enabled or not: Helm's
``action.CheckDependencies`` (which the Kubernetes provider calls before an install) matches
them by name and ignores conditions; only afterwards are disabled ones dropped. Grafana's chart
lives in another repository that the module proxy does not serve at the version asked for, so
the package holds a placeholder ``grafana`` chart (no templates, no values) that satisfies that
check; the e2e stack turns Grafana off (``grafana.enabled: false``), so nothing of it renders.

The images the chart runs are read from its ``values.yaml`` (:func:`images`), so the e2e suite
builds exactly the references the chart renders.

``python -m tools.monitoring_chart package DIR`` writes the repository into DIR;
``python -m tools.monitoring_chart build-env`` prints the Go module versions of the images as
shell assignments (for ``tools/build-monitoring.sh``).
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import functools
import gzip
import hashlib
import http.server
import io
import json
import re
import subprocess
import sys
import tarfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
VERSIONS = ROOT / "tools" / "versions.env"
MODULE = "github.com/prometheus-community/helm-charts"
CHART = "kube-prometheus-stack"
PLACEHOLDERS = frozenset({"grafana"})
"""Dependencies packaged as empty placeholder charts: their repository is not served here."""
OPERATOR_MODULE = "github.com/prometheus-operator/prometheus-operator"
PROMETHEUS_MODULE = "github.com/prometheus/prometheus"
ALERTMANAGER_MODULE = "github.com/prometheus/alertmanager"
_SEMVER_TAG = re.compile(r"^v(\d+)\.(\d+)\.(\d+)(-[A-Za-z0-9.-]+)?$")


class ChartError(RuntimeError):
    """The pinned chart snapshot is missing, altered, or not what the chart asks for."""


def versions_env(path: Path = VERSIONS) -> dict[str, str]:
    """``KEY=VALUE`` lines of ``tools/versions.env``."""
    out = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


@functools.cache
def module_dir() -> Path:
    """The pinned snapshot's directory in the Go module cache (``go mod download``, which
    fetches it once), after checking its ``h1:`` sum against ``tools/versions.env``."""
    pins = versions_env()
    version, pinned_sum = pins["MONITORING_CHARTS_MODULE"], pins["MONITORING_CHARTS_SUM"]
    try:
        out = subprocess.run(
            ["go", "mod", "download", "-json", f"{MODULE}@{version}"],
            capture_output=True, text=True, timeout=600, check=False, cwd="/",
        )  # fmt: skip
    except FileNotFoundError:
        raise ChartError("go missing: the chart comes from the Go module proxy (Go 1.26)") from None
    info = json.loads(out.stdout or "{}")
    if out.returncode != 0 or "Error" in info:
        raise ChartError(f"go mod download {MODULE}@{version}: {info.get('Error', out.stderr)}")
    if info["Sum"] != pinned_sum:
        raise ChartError(
            f"{MODULE}@{version}: sum {info['Sum']} differs from MONITORING_CHARTS_SUM "
            f"{pinned_sum} in {VERSIONS}"
        )
    return Path(info["Dir"])


def _load(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())


@dataclass(frozen=True)
class Chart:
    """One chart directory of the snapshot."""

    path: Path

    @property
    def metadata(self) -> dict[str, Any]:
        return _load(self.path / "Chart.yaml")

    @property
    def values(self) -> dict[str, Any]:
        return _load(self.path / "values.yaml") or {}

    @property
    def name(self) -> str:
        return str(self.metadata["name"])

    @property
    def version(self) -> str:
        return str(self.metadata["version"])


def chart(root: Path | None = None) -> Chart:
    """kube-prometheus-stack in the pinned snapshot (``root``: another snapshot directory)."""
    return Chart((root or module_dir()) / "charts" / CHART)


def version_matches(version: str, constraint: str) -> bool:
    """Whether ``version`` meets a dependency's version: exact, or a ``*`` wildcard
    (``0.12.*``), the only forms kube-prometheus-stack uses; anything else is refused."""
    if not re.fullmatch(r"[0-9.*]+", constraint):
        raise ChartError(f"dependency version {constraint!r}: only exact or '*' forms are handled")
    return fnmatch.fnmatchcase(version, constraint)


def dependencies(parent: Chart) -> list[tuple[dict[str, Any], Chart | None]]:
    """Each dependency of ``parent`` with the chart that satisfies it: its own ``charts/``
    directory, else the sibling chart of the snapshot; ``None`` for a placeholder."""
    out: list[tuple[dict[str, Any], Chart | None]] = []
    for dep in parent.metadata.get("dependencies") or []:
        name = dep["name"]
        if name in PLACEHOLDERS:
            out.append((dep, None))
            continue
        inner = parent.path / "charts" / name
        found = Chart(inner if inner.is_dir() else parent.path.parent / name)
        if not (found.path / "Chart.yaml").is_file():
            raise ChartError(f"{parent.name}: dependency {name} is not in the snapshot")
        if not version_matches(found.version, str(dep["version"])):
            raise ChartError(
                f"{parent.name}: dependency {name} {dep['version']} asked for; the snapshot "
                f"has {found.version}"
            )
        out.append((dep, found))
    return out


def _ignore_patterns(path: Path) -> list[str]:
    ignore = path / ".helmignore"
    if not ignore.exists():
        return []
    lines = [line.strip() for line in ignore.read_text().splitlines()]
    patterns = [line for line in lines if line and not line.startswith("#")]
    if any(p.startswith("!") for p in patterns):
        raise ChartError(f"{ignore}: negated patterns are not handled")
    return patterns


def ignored(relative: str, patterns: list[str], is_dir: bool) -> bool:
    """Helm's ``.helmignore`` rules, as far as charts use them: a pattern without ``/``
    matches a file or directory name at any depth, one with ``/`` the path from the chart's
    root, and a trailing ``/`` only directories."""
    name = relative.rsplit("/", 1)[-1]
    for pattern in patterns:
        dir_only = pattern.endswith("/")
        p = pattern.rstrip("/")
        if dir_only and not is_dir:
            continue
        if "/" in p:
            if fnmatch.fnmatchcase(relative, p.lstrip("/")):
                return True
        elif fnmatch.fnmatchcase(name, p):
            return True
    return False


def chart_files(source: Chart) -> dict[str, bytes]:
    """The files ``helm package`` would take from ``source`` (relative path -> content),
    ignoring what its ``.helmignore`` names and the dependencies under ``charts/``."""
    patterns = _ignore_patterns(source.path)
    files: dict[str, bytes] = {}

    def walk(directory: Path, prefix: str) -> None:
        for entry in sorted(directory.iterdir()):
            relative = f"{prefix}{entry.name}"
            if ignored(relative, patterns, entry.is_dir()):
                continue
            if entry.is_dir():
                if relative != "charts":  # dependencies are added from dependencies()
                    walk(entry, f"{relative}/")
            else:
                files[relative] = entry.read_bytes()

    walk(source.path, "")
    return files


def placeholder(dep: dict[str, Any]) -> dict[str, bytes]:
    """A chart with the dependency's name and version and nothing to render."""
    meta = {
        "apiVersion": "v2",
        "name": dep["name"],
        "version": str(dep["version"]),
        "description": (
            "Placeholder for a dependency whose repository cannot be reached here (e2e only); "
            "it renders nothing and must stay disabled."
        ),
        "type": "application",
    }
    return {"Chart.yaml": yaml.safe_dump(meta, sort_keys=False).encode()}


def packaged_files(parent: Chart) -> dict[str, bytes]:
    """Every file of the packaged chart, under ``<name>/`` as ``helm package`` lays it out."""
    files = {f"{parent.name}/{k}": v for k, v in chart_files(parent).items()}
    for dep, found in dependencies(parent):
        content = placeholder(dep) if found is None else packaged_files(found)
        prefix = f"{parent.name}/charts/{dep['name']}/"
        if found is not None:  # packaged_files put it under its own name
            content = {k.split("/", 1)[1]: v for k, v in content.items()}
        files.update({f"{prefix}{k}": v for k, v in content.items()})
    return files


def tgz(files: dict[str, bytes]) -> bytes:
    """A reproducible gzipped tar of ``files`` (sorted, time 0, mode 0644)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in sorted(files.items()):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue(), mtime=0)


def package(out: Path, source: Chart | None = None) -> Path:
    """Write the Helm repository (``index.yaml`` and the chart's ``.tgz``) into ``out``;
    the archive's path."""
    parent = source or chart()
    archive = tgz(packaged_files(parent))
    name = f"{parent.name}-{parent.version}.tgz"
    out.mkdir(parents=True, exist_ok=True)
    (out / name).write_bytes(archive)
    entry = {
        **parent.metadata,
        "urls": [name],
        "digest": hashlib.sha256(archive).hexdigest(),
        "created": "1970-01-01T00:00:00Z",
    }
    index = {
        "apiVersion": "v1",
        "entries": {parent.name: [entry]},
        "generated": "1970-01-01T00:00:00Z",
    }
    (out / "index.yaml").write_text(yaml.safe_dump(index, sort_keys=False))
    return out / name


def read_packaged(archive: Path) -> dict[str, bytes]:
    """The files of a packaged chart (path -> content)."""
    with tarfile.open(archive) as tar:
        return {
            m.name: tar.extractfile(m).read()  # type: ignore[union-attr]
            for m in tar.getmembers()
            if m.isfile()
        }


# --- The images the chart runs. ---


@dataclass(frozen=True)
class ImageBuild:
    """One image the chart runs, and the Go module whose commands it holds.

    Attributes:
        reference: ``registry/repository:tag`` exactly as the chart renders it.
        module: the Go module, at ``version``.
        commands: ``/bin/<name>`` in the image -> the package path in the module.
    """

    reference: str
    module: str
    version: str
    commands: dict[str, str]

    @property
    def entrypoint(self) -> str:
        return f"/bin/{next(iter(self.commands))}"


def _reference(image: dict[str, Any], default_tag: str) -> str:
    if image.get("sha"):
        raise ChartError(f"image {image['repository']}: digests (sha) are not handled")
    return f"{image['registry']}/{image['repository']}:{image.get('tag') or default_tag}"


def module_version_of(tag: str, *, prometheus: bool = False) -> str:
    """The Go module version of an image tag: the same for most modules; Prometheus's
    ``v3.14.0`` is its module's ``v0.314.0`` (``v0.<major><minor:02>.<patch>``)."""
    match = _SEMVER_TAG.match(tag)
    if match is None:
        raise ChartError(f"image tag {tag!r} is not a 'vMAJOR.MINOR.PATCH[-suffix]' release")
    major, minor, patch = (int(g) for g in match.groups()[:3])
    if prometheus:
        return f"v0.{major * 100 + minor}.{patch}"
    return f"v{major}.{minor}.{patch}"


def images(source: Chart | None = None) -> list[ImageBuild]:
    """The operator, config reloader, Prometheus and Alertmanager images of the chart's
    values (their tags, or the chart's ``appVersion`` where the tag is empty)."""
    parent = source or chart()
    values, app_version = parent.values, str(parent.metadata["appVersion"])
    operator = values["prometheusOperator"]
    prometheus = values["prometheus"]["prometheusSpec"]["image"]
    alertmanager = values["alertmanager"]["alertmanagerSpec"]["image"]
    operator_version = module_version_of(app_version)
    return [
        ImageBuild(
            _reference(operator["image"], app_version),
            OPERATOR_MODULE,
            operator_version,
            {"operator": f"{OPERATOR_MODULE}/cmd/operator"},
        ),
        ImageBuild(
            _reference(operator["prometheusConfigReloader"]["image"], app_version),
            OPERATOR_MODULE,
            operator_version,
            {"prometheus-config-reloader": f"{OPERATOR_MODULE}/cmd/prometheus-config-reloader"},
        ),
        ImageBuild(
            _reference(prometheus, ""),
            PROMETHEUS_MODULE,
            module_version_of(prometheus["tag"], prometheus=True),
            {"prometheus": f"{PROMETHEUS_MODULE}/cmd/prometheus"},
        ),
        ImageBuild(
            _reference(alertmanager, ""),
            ALERTMANAGER_MODULE,
            module_version_of(alertmanager["tag"]),
            {"alertmanager": f"{ALERTMANAGER_MODULE}/cmd/alertmanager"},
        ),
    ]


def build_env(source: Chart | None = None) -> str:
    """``<MODULE>_VERSION=<version>`` lines for the build script, one per Go module."""
    names = {
        OPERATOR_MODULE: "OPERATOR",
        PROMETHEUS_MODULE: "PROMETHEUS",
        ALERTMANAGER_MODULE: "ALERTMANAGER",
    }
    lines = {f"{names[i.module]}_MODULE_VERSION={i.version}" for i in images(source)}
    return "\n".join(sorted(lines)) + "\n"


# --- Serving the repository (the e2e fixture). ---


@contextlib.contextmanager
def serve(directory: Path) -> Iterator[str]:
    """An HTTP server for ``directory`` on a free loopback port, in a thread, for the
    duration of the block; yields its URL (a Helm repository URL when it holds index.yaml)."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(directory), **kwargs)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib's name
            return

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    thread = threading.Thread(target=server.serve_forever, name="chart-repository", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.monitoring_chart", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    pack = sub.add_parser("package", help="write the Helm repository into DIR")
    pack.add_argument("dir", type=Path)
    sub.add_parser("build-env", help="print the images' Go module versions (shell)")
    args = parser.parse_args(argv)
    try:
        if args.command == "package":
            print(package(args.dir))
        else:
            sys.stdout.write(build_env())
    except ChartError as err:
        print(f"monitoring chart: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
