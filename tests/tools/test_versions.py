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


def test_provider_plugin_version_is_the_pinned_sdks() -> None:
    pins = (ROOT / "requirements" / "infra.txt").read_text()
    sdk = next(p.split("==")[1] for p in pins.split() if p.startswith("pulumi-kubernetes=="))
    # PyPI's 4.25.0a1768448096 is the plugin's semver 4.25.0-alpha.1768448096.
    base, _, alpha = sdk.partition("a")
    expected = f"{base}-alpha.{alpha}" if alpha else base
    assert versions()["PULUMI_KUBERNETES_PLUGIN"] == expected, sdk
