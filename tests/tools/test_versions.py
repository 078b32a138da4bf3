"""``tools/versions.env`` agrees with the pins it mirrors elsewhere."""

from __future__ import annotations

from pathlib import Path

from infra import image

ROOT = Path(__file__).resolve().parents[2]


def versions() -> dict[str, str]:
    out = {}
    for line in (ROOT / "tools" / "versions.env").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            key, _, value = line.partition("=")
            out[key] = value
    return out


def test_stand_in_base_image_has_the_dockerfiles_tensorflow() -> None:
    assert versions()["TENSORFLOW_VERSION"] == image.TF_VERSION
