"""The real node's own images, written as OCI image archives (no registry, no Docker daemon).

Nothing can be pulled here, so the node imports every image it runs (``ctr images import``):

* ``tfd.local/pause``: the sandbox image (containerd's ``sandbox_image``), one static binary
  built from ``tools/pause`` by ``make tools``;
* ``tfd.local/busybox``: Debian's static busybox with the applets the node's checks use
  (``sh``, ``nslookup``, ``nc``, ``wget``, ``sleep``...).

An archive is an OCI image layout in a tar: one uncompressed layer, its config and manifest,
and an index whose ``io.containerd.image.name`` annotation names the image for ``ctr``.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

PAUSE_IMAGE = "tfd.local/pause:1"
BUSYBOX_IMAGE = "tfd.local/busybox:1"
BUSYBOX_APPLETS = (
    "sh", "cat", "echo", "env", "id", "ls", "mkdir", "nc", "nslookup", "sleep", "timeout",
    "wget", "hostname", "httpd", "true", "false", "test",
)  # fmt: skip
MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar"


@dataclass(frozen=True)
class Image:
    """What goes into an image: files (path -> content), symlinks (path -> target), entrypoint."""

    name: str
    files: Mapping[str, bytes]
    symlinks: Mapping[str, str] = field(default_factory=dict)
    directories: Sequence[str] = ()
    entrypoint: Sequence[str] = ()
    env: Sequence[str] = ("PATH=/bin",)


def _info(name: str, kind: bytes, mode: int, size: int = 0, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.size, info.linkname = kind, mode, size, link
    info.mtime = 0  # reproducible: the same inputs give the same digests
    return info


def layer_tar(image: Image) -> bytes:
    """The image's single layer: every parent directory, then files and symlinks, sorted."""
    paths = [*image.files, *image.symlinks, *image.directories]
    dirs = set(image.directories)
    for path in paths:
        parts = path.strip("/").split("/")[:-1]
        dirs.update("/".join(parts[: i + 1]) for i in range(len(parts)))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in sorted(d.strip("/") for d in dirs):
            mode = 0o1777 if d == "tmp" else 0o755
            tar.addfile(_info(d + "/", tarfile.DIRTYPE, mode))
        for path, data in sorted(image.files.items()):
            tar.addfile(_info(path.strip("/"), tarfile.REGTYPE, 0o755, len(data)), io.BytesIO(data))
        for path, target in sorted(image.symlinks.items()):
            tar.addfile(_info(path.strip("/"), tarfile.SYMTYPE, 0o777, link=target))
    return buf.getvalue()


def _blob(data: bytes) -> tuple[str, bytes]:
    return "sha256:" + hashlib.sha256(data).hexdigest(), data


def oci_archive(image: Image) -> bytes:
    """An OCI image layout (tar) holding ``image``, named for ``ctr images import``."""
    layer_digest, layer = _blob(layer_tar(image))
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Entrypoint": list(image.entrypoint), "Env": list(image.env)},
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
    }
    config_digest, config_bytes = _blob(json.dumps(config, sort_keys=True).encode())
    manifest = {
        "schemaVersion": 2,
        "mediaType": MEDIA_MANIFEST,
        "config": {"mediaType": MEDIA_CONFIG, "digest": config_digest, "size": len(config_bytes)},
        "layers": [{"mediaType": MEDIA_LAYER, "digest": layer_digest, "size": len(layer)}],
    }
    manifest_digest, manifest_bytes = _blob(json.dumps(manifest, sort_keys=True).encode())
    index = {
        "schemaVersion": 2,
        "manifests": [
            {
                "mediaType": MEDIA_MANIFEST,
                "digest": manifest_digest,
                "size": len(manifest_bytes),
                "annotations": {
                    "io.containerd.image.name": image.name,
                    "org.opencontainers.image.ref.name": image.name.rsplit(":", 1)[-1],
                },
            }
        ],
    }
    entries = {
        "oci-layout": json.dumps({"imageLayoutVersion": "1.0.0"}).encode(),
        "index.json": json.dumps(index, sort_keys=True).encode(),
    }
    for digest, data in ((layer_digest, layer), (config_digest, config_bytes)):
        entries[f"blobs/sha256/{digest.removeprefix('sha256:')}"] = data
    entries[f"blobs/sha256/{manifest_digest.removeprefix('sha256:')}"] = manifest_bytes
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for d in ("blobs/", "blobs/sha256/"):
            tar.addfile(_info(d, tarfile.DIRTYPE, 0o755))
        for name, data in entries.items():
            tar.addfile(_info(name, tarfile.REGTYPE, 0o644, len(data)), io.BytesIO(data))
    return buf.getvalue()


def pause_image(binary: Path) -> Image:
    return Image(PAUSE_IMAGE, {"pause": binary.read_bytes()}, entrypoint=("/pause",))


def busybox_image(busybox: Path) -> Image:
    return Image(
        BUSYBOX_IMAGE,
        {"bin/busybox": busybox.read_bytes()},
        symlinks={f"bin/{applet}": "busybox" for applet in BUSYBOX_APPLETS},
        directories=("tmp",),
        entrypoint=("/bin/sh",),
    )
