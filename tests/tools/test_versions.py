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


def test_device_plugin_speaks_the_kubelets_device_plugin_api() -> None:
    # tools/devplugin registers with the real node's kubelet: its API module is the staging
    # module of the kubelet's own Kubernetes version.
    k8s = versions()["KUBERNETES_VERSION"]
    staging = "v0." + k8s.split(".", 1)[1]
    gomod = (ROOT / "tools" / "devplugin" / "go.mod").read_text()
    required = [line.split() for line in gomod.splitlines() if "k8s.io/kubelet " in line]
    assert required and required[0][-1] == staging, (
        f"tools/devplugin/go.mod requires {required}, not k8s.io/kubelet {staging} of "
        f"KUBERNETES_VERSION {k8s}"
    )
