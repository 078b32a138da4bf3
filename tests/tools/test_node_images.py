"""The real node's OCI image archives (``tools/node_images.py``): what ``ctr images import``
reads, checked without containerd."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile

import pytest

from tools import node_images
from tools.node_images import Image


def members(data: bytes) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return {m.name: m for m in tar.getmembers()}


def read(data: bytes, name: str) -> bytes:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        f = tar.extractfile(name)
        assert f is not None, f"{name} is not a file in the archive"
        return f.read()


IMAGES = [
    Image("tfd.local/pause:1", {"pause": b"\x7fELF-pause"}, entrypoint=("/pause",)),
    Image(
        "tfd.local/busybox:1",
        {"bin/busybox": b"\x7fELF-busybox"},
        symlinks={"bin/sh": "busybox", "bin/nslookup": "busybox"},
        directories=("tmp",),
        entrypoint=("/bin/sh",),
    ),
]


@pytest.mark.parametrize("image", IMAGES, ids=lambda i: i.name)
def test_archive_is_an_oci_layout_named_for_ctr(image: Image) -> None:
    archive = node_images.oci_archive(image)
    index = json.loads(read(archive, "index.json"))
    [entry] = index["manifests"]
    assert entry["annotations"]["io.containerd.image.name"] == image.name
    manifest_bytes = read(archive, f"blobs/sha256/{entry['digest'].removeprefix('sha256:')}")
    assert "sha256:" + hashlib.sha256(manifest_bytes).hexdigest() == entry["digest"]
    manifest = json.loads(manifest_bytes)
    for blob in [manifest["config"], *manifest["layers"]]:
        data = read(archive, f"blobs/sha256/{blob['digest'].removeprefix('sha256:')}")
        assert len(data) == blob["size"], f"{image.name}: size of {blob['digest']}"
        assert "sha256:" + hashlib.sha256(data).hexdigest() == blob["digest"], image.name
    config = json.loads(read(archive, f"blobs/sha256/{manifest['config']['digest'][7:]}"))
    assert config["config"]["Entrypoint"] == list(image.entrypoint)
    # An uncompressed layer: its diff ID is its digest.
    assert config["rootfs"]["diff_ids"] == [manifest["layers"][0]["digest"]]


@pytest.mark.parametrize("image", IMAGES, ids=lambda i: i.name)
def test_layer_holds_every_file_link_and_parent_directory(image: Image) -> None:
    layer = members(node_images.layer_tar(image))
    for path in image.files:
        assert layer[path].isfile() and layer[path].mode & 0o111, f"{path} not an executable"
    for path, target in image.symlinks.items():
        assert layer[path].issym() and layer[path].linkname == target, path
    for path in [*image.files, *image.symlinks]:
        parent = path.rsplit("/", 1)[0] if "/" in path else None
        assert parent is None or layer[parent].isdir(), f"{path}: parent directory missing"
    if "tmp" in image.directories:
        assert layer["tmp"].mode == 0o1777


def test_archives_are_reproducible() -> None:
    image = IMAGES[1]
    assert node_images.oci_archive(image) == node_images.oci_archive(image)


def test_busybox_image_links_the_applets_the_node_checks_use(tmp_path) -> None:
    busybox = tmp_path / "busybox"
    busybox.write_bytes(b"static")
    image = node_images.busybox_image(busybox)
    for applet in ("sh", "nslookup", "nc", "wget", "sleep", "timeout"):
        assert image.symlinks.get(f"bin/{applet}") == "busybox", applet
