"""The monitoring stack's images for the real node: the binaries ``tools/build-monitoring.sh``
builds, each written into a minimal OCI image under exactly the reference the chart renders
(:func:`tools.monitoring_chart.images`), so the kubelet finds them in containerd and pulls
nothing.

Each image holds its commands in ``/bin`` (the entrypoint is the first), the CA bundle of this
machine at ``/etc/ssl/certs/ca-certificates.crt`` (as distroless images carry one), ``/tmp``,
and ``/etc/passwd``/``/etc/group`` naming ``nobody`` (65534), the user the chart runs the
operator as. The operator starts Prometheus and Alertmanager with arguments only and the
config reloader with its command, which these entrypoints serve.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from tools import monitoring_chart, node_images

BIN = Path(__file__).resolve().parent.parent / ".tools" / "bin"
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
BINARY_NAMES = {"operator": "prometheus-operator"}
"""``/bin/<name>`` in an image -> the name ``make tools`` links into ``.tools/bin`` (where the
image's name is too generic for a shared ``bin`` directory)."""
PASSWD = (
    b"root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n"
)
GROUP = b"root:x:0:\nnobody:x:65534:\n"


def binary(command: str, bin_dir: Path = BIN) -> Path:
    """Where ``make tools`` put the binary of ``/bin/<command>``."""
    return bin_dir / BINARY_NAMES.get(command, command)


def image(build: monitoring_chart.ImageBuild, bin_dir: Path = BIN) -> node_images.Image:
    """The image of ``build`` from the built binaries (missing ones: run ``make tools``)."""
    files: dict[str, bytes] = {}
    for command in build.commands:
        path = binary(command, bin_dir)
        if not path.exists():
            raise FileNotFoundError(f"{path} missing: run `make tools` (tools/build-monitoring.sh)")
        files[f"bin/{command}"] = path.read_bytes()
    files["etc/passwd"] = PASSWD
    files["etc/group"] = GROUP
    if CA_BUNDLE.exists():
        files[str(CA_BUNDLE).lstrip("/")] = CA_BUNDLE.read_bytes()
    return node_images.Image(
        build.reference, files, directories=("tmp",), entrypoint=(build.entrypoint,)
    )


def archives(bin_dir: Path = BIN) -> Iterator[tuple[str, bytes]]:
    """``(reference, OCI archive)`` of every image the chart runs, one at a time (Prometheus's
    is over 100 MB)."""
    for build in monitoring_chart.images():
        yield build.reference, node_images.oci_archive(image(build, bin_dir))
