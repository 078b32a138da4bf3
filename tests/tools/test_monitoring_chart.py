"""The e2e suite's kube-prometheus-stack (``tools/monitoring_chart.py``): the pinned snapshot is
the program's default chart version, and its package is what Helm installs from a repository.

The snapshot comes from the Go module proxy (``go mod download``, cached in the Go module cache).
"""

from __future__ import annotations

import hashlib
import tarfile
from pathlib import Path

import pytest
import yaml

from infra import monitoring
from tools import monitoring_chart
from tools.monitoring_chart import Chart, ChartError

ROOT = Path(__file__).resolve().parents[2]
E2E_VALUES = ROOT / "tests" / "e2e" / "monitoring-values.yaml"


@pytest.fixture(scope="module")
def chart() -> Chart:
    return monitoring_chart.chart()


@pytest.fixture(scope="module")
def repository(chart: Chart, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("chart-repository")
    monitoring_chart.package(out, chart)
    return out


def test_pinned_chart_is_the_programs_default_version(chart: Chart) -> None:
    assert chart.name == monitoring.CHART_NAME
    assert chart.version == monitoring.DEFAULT_CHART_VERSION, (
        f"tools/versions.env's chart snapshot holds {chart.name} {chart.version}; the program's "
        f"default (infra/monitoring.py) is {monitoring.DEFAULT_CHART_VERSION}"
    )


def test_docs_name_the_tested_chart_operator_and_images(chart: Chart) -> None:
    docs = (ROOT / "docs" / "monitoring.md").read_text()
    expected = [f"kube-prometheus-stack {chart.version}"]
    expected += [f"`{build.reference}`" for build in monitoring_chart.images(chart)]
    missing = [text for text in expected if text not in docs]
    assert not missing, f"docs/monitoring.md does not name the tested versions: {missing}"


def test_repository_index_points_at_the_archive(chart: Chart, repository: Path) -> None:
    index = yaml.safe_load((repository / "index.yaml").read_text())
    [entry] = index["entries"][chart.name]
    archive = repository / entry["urls"][0]
    assert entry["version"] == chart.version and entry["appVersion"] == chart.metadata["appVersion"]
    assert entry["digest"] == hashlib.sha256(archive.read_bytes()).hexdigest(), "index digest"
    assert entry["dependencies"] == chart.metadata["dependencies"]


def test_archive_holds_the_chart_and_every_dependency(chart: Chart, repository: Path) -> None:
    files = monitoring_chart.read_packaged(repository / f"{chart.name}-{chart.version}.tgz")
    top = chart.name
    for name in ("Chart.yaml", "values.yaml", "templates/prometheus-operator/deployment.yaml"):
        assert files[f"{top}/{name}"] == (chart.path / name).read_bytes(), f"{name} altered"
    for dep in chart.metadata["dependencies"]:
        meta = yaml.safe_load(files[f"{top}/charts/{dep['name']}/Chart.yaml"])
        assert meta["name"] == dep["name"], dep
        assert monitoring_chart.version_matches(str(meta["version"]), str(dep["version"])), (
            f"charts/{dep['name']} is {meta['version']}; {chart.name} asks for {dep['version']}"
        )
        inside = [f for f in files if f.startswith(f"{top}/charts/{dep['name']}/")]
        if dep["name"] in monitoring_chart.PLACEHOLDERS:
            assert inside == [f"{top}/charts/{dep['name']}/Chart.yaml"], "placeholder renders"
        else:
            assert any("/templates/" in f for f in inside), f"charts/{dep['name']}: no templates"


def test_archive_leaves_out_what_helmignore_names(chart: Chart, repository: Path) -> None:
    with tarfile.open(repository / f"{chart.name}-{chart.version}.tgz") as tar:
        names = tar.getnames()
    for ignored in ("unittests/", "ci/", "hack/", "files/dashboards/", "UPGRADE.md"):
        hits = [n for n in names if n.startswith(f"{chart.name}/{ignored}")]
        assert not hits, f".helmignore names {ignored}; packaged: {hits[:3]}"
    assert (chart.path / "UPGRADE.md").exists(), "the test must look for a file the chart has"


def test_every_placeholder_is_disabled_by_the_e2e_values(chart: Chart) -> None:
    values = yaml.safe_load(E2E_VALUES.read_text())
    for dep in chart.metadata["dependencies"]:
        if dep["name"] not in monitoring_chart.PLACEHOLDERS:
            continue
        node = values
        for part in dep["condition"].split("."):
            node = node.get(part, {}) if isinstance(node, dict) else {}
        assert node is False, f"{E2E_VALUES.name}: {dep['condition']} must be false (placeholder)"


def test_images_name_one_module_version_each(chart: Chart) -> None:
    builds = monitoring_chart.images(chart)
    assert len({b.reference for b in builds}) == len(builds) == 4
    env = dict(line.split("=", 1) for line in monitoring_chart.build_env(chart).splitlines())
    for build in builds:
        key = {
            monitoring_chart.OPERATOR_MODULE: "OPERATOR_MODULE_VERSION",
            monitoring_chart.PROMETHEUS_MODULE: "PROMETHEUS_MODULE_VERSION",
            monitoring_chart.ALERTMANAGER_MODULE: "ALERTMANAGER_MODULE_VERSION",
        }[build.module]
        assert env[key] == build.version, f"build-env {key} for {build.reference}"


@pytest.mark.parametrize(
    ("tag", "prometheus", "version"),
    [
        ("v3.14.0-distroless", True, "v0.314.0"),
        ("v3.5.2", True, "v0.305.2"),
        ("v0.34.0", False, "v0.34.0"),
        ("v0.93.1", False, "v0.93.1"),
    ],
)
def test_module_version_of_an_image_tag(tag: str, prometheus: bool, version: str) -> None:
    assert monitoring_chart.module_version_of(tag, prometheus=prometheus) == version


@pytest.mark.parametrize("tag", ["latest", "3.14.0", "v3.14"])
def test_module_version_refuses_other_tags(tag: str) -> None:
    with pytest.raises(ChartError, match="is not a 'vMAJOR.MINOR.PATCH"):
        monitoring_chart.module_version_of(tag)


@pytest.mark.parametrize(
    ("version", "constraint", "ok"),
    [("8.4.1", "8.4.1", True), ("8.4.2", "8.4.1", False), ("0.12.8", "0.12.*", True),
     ("0.13.0", "0.12.*", False)],
)  # fmt: skip
def test_version_matches(version: str, constraint: str, ok: bool) -> None:
    assert monitoring_chart.version_matches(version, constraint) is ok


def test_version_matches_refuses_ranges() -> None:
    with pytest.raises(ChartError, match="only exact or"):
        monitoring_chart.version_matches("1.2.3", ">=1.0.0")


@pytest.mark.parametrize(
    ("path", "is_dir", "ignored"),
    [
        ("unittests", True, True),
        ("templates/unittests", True, True),
        ("hack", False, False),  # "hack/" names directories only
        ("files/dashboards", True, True),
        ("files/other", True, False),
        ("UPGRADE.md", False, True),
        ("templates/x.swp", False, True),
        ("templates/x.yaml", False, False),
    ],
)
def test_helmignore_rules(path: str, is_dir: bool, ignored: bool) -> None:
    patterns = ["unittests/", "hack/", "files/dashboards/", "UPGRADE.md", "*.swp"]
    assert monitoring_chart.ignored(path, patterns, is_dir) is ignored, path


def _chart_dir(root: Path, name: str, version: str, deps: list[dict] | None = None) -> Path:
    path = root / "charts" / name
    (path / "templates").mkdir(parents=True)
    meta = {"apiVersion": "v2", "name": name, "version": version, "dependencies": deps or []}
    (path / "Chart.yaml").write_text(yaml.safe_dump(meta))
    (path / "templates" / "x.yaml").write_text("kind: ConfigMap\n")
    return path


def test_a_dependency_at_another_version_is_refused(tmp_path: Path) -> None:
    _chart_dir(tmp_path, "parent", "1.0.0", [{"name": "child", "version": "2.0.0"}])
    _chart_dir(tmp_path, "child", "2.0.1")
    with pytest.raises(ChartError, match=r"child 2.0.0 asked for; the snapshot has 2.0.1"):
        monitoring_chart.packaged_files(Chart(tmp_path / "charts" / "parent"))


def test_a_missing_dependency_is_refused(tmp_path: Path) -> None:
    _chart_dir(tmp_path, "parent", "1.0.0", [{"name": "absent", "version": "1.0.0"}])
    with pytest.raises(ChartError, match="dependency absent is not in the snapshot"):
        monitoring_chart.packaged_files(Chart(tmp_path / "charts" / "parent"))


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        # What `go mod download -json` prints: the snapshot altered, or refused.
        ({"Dir": "/m", "Sum": "h1:other="}, r"sum h1:other= differs from MONITORING_CHARTS_SUM"),
        ({"Error": "reading: 403 Forbidden"}, r"go mod download .*403 Forbidden"),
    ],
)
def test_a_snapshot_that_is_not_the_pinned_one_is_refused(
    monkeypatch: pytest.MonkeyPatch, answer: dict[str, str], message: str
) -> None:
    import json
    import subprocess

    def download(cmd: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        assert cmd[:3] == ["go", "mod", "download"], cmd
        return subprocess.CompletedProcess(cmd, 0, json.dumps(answer), "")

    monkeypatch.setattr(monitoring_chart.subprocess, "run", download)
    monitoring_chart.module_dir.cache_clear()
    try:
        with pytest.raises(ChartError, match=message):
            monitoring_chart.module_dir()
    finally:
        monitoring_chart.module_dir.cache_clear()


def test_packaging_is_reproducible(tmp_path: Path) -> None:
    _chart_dir(tmp_path, "parent", "1.0.0", [{"name": "grafana", "version": "9.9.9"}])
    first = monitoring_chart.package(tmp_path / "a", Chart(tmp_path / "charts" / "parent"))
    second = monitoring_chart.package(tmp_path / "b", Chart(tmp_path / "charts" / "parent"))
    assert first.read_bytes() == second.read_bytes()
    files = monitoring_chart.read_packaged(first)
    placeholder = yaml.safe_load(files["parent/charts/grafana/Chart.yaml"])
    assert (placeholder["name"], placeholder["version"]) == ("grafana", "9.9.9")


def test_the_repository_is_served_on_loopback(tmp_path: Path) -> None:
    import urllib.request

    (tmp_path / "index.yaml").write_text("apiVersion: v1\n")
    with monitoring_chart.serve(tmp_path) as url:
        assert url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(f"{url}/index.yaml", timeout=30) as response:
            assert response.read() == b"apiVersion: v1\n"
