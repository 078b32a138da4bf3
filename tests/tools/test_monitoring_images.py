"""The monitoring stack's images for the real node (``tools/monitoring_images.py``), from stand-in
binaries: names, entrypoints and files, checked without containerd."""

from __future__ import annotations

import io
import json
import re
import tarfile
from pathlib import Path

import pytest

from tools import monitoring_chart, monitoring_images, node_images

BUILD = monitoring_chart.ImageBuild(
    reference="quay.io/prometheus-operator/prometheus-operator:v0.93.1",
    module=monitoring_chart.OPERATOR_MODULE,
    version="v0.93.1",
    commands={"operator": f"{monitoring_chart.OPERATOR_MODULE}/cmd/operator"},
)


def _layer(archive: bytes) -> dict[str, tarfile.TarInfo | bytes]:
    with tarfile.open(fileobj=io.BytesIO(archive)) as outer:
        index = json.loads(outer.extractfile("index.json").read())  # type: ignore[union-attr]
        digest = index["manifests"][0]["digest"].removeprefix("sha256:")
        manifest = json.loads(outer.extractfile(f"blobs/sha256/{digest}").read())  # type: ignore[union-attr]
        layer = manifest["layers"][0]["digest"].removeprefix("sha256:")
        data = outer.extractfile(f"blobs/sha256/{layer}").read()  # type: ignore[union-attr]
    with tarfile.open(fileobj=io.BytesIO(data)) as inner:
        return {
            m.name: inner.extractfile(m).read() if m.isfile() else m  # type: ignore[union-attr]
            for m in inner.getmembers()
        }


def test_image_holds_the_binary_under_the_charts_entrypoint(tmp_path: Path) -> None:
    (tmp_path / "prometheus-operator").write_bytes(b"\x7fELF-operator")
    image = monitoring_images.image(BUILD, tmp_path)
    assert image.name == BUILD.reference
    assert tuple(image.entrypoint) == ("/bin/operator",)
    files = _layer(node_images.oci_archive(image))
    assert files["bin/operator"] == b"\x7fELF-operator"
    assert b"nobody:x:65534:65534" in files["etc/passwd"], "the chart runs the operator as 65534"
    assert "tmp/" in files or "tmp" in files, sorted(files)


def test_a_missing_binary_names_make_tools(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"prometheus-operator missing: run `make tools`"):
        monitoring_images.image(BUILD, tmp_path)


@pytest.mark.parametrize(
    ("command", "name"),
    [("operator", "prometheus-operator"), ("prometheus", "prometheus"),
     ("prometheus-config-reloader", "prometheus-config-reloader")],
)  # fmt: skip
def test_binary_names_in_the_shared_bin_directory(command: str, name: str) -> None:
    assert monitoring_images.binary(command, Path("/b")) == Path("/b") / name


def test_build_script_links_every_binary_the_images_need() -> None:
    script = (Path(monitoring_images.__file__).parent / "build-monitoring.sh").read_text()
    for build in monitoring_chart.images():
        for command in build.commands:
            name = monitoring_images.binary(command, Path("/b")).name
            # Each binary is a `go build -o` output: bin/NAME or "$dir/bin/NAME".
            assert re.search(rf"-o (\S*/)?bin/{re.escape(name)}\"?(\s|$)", script), (
                f"tools/build-monitoring.sh has no `go build -o .../bin/{name}` for "
                f"{build.reference}"
            )
