"""The outputs a real ``docker.Image`` create returns, for ``pulumi.runtime.Mocks``: offline
renders (``tools/render.py``) and unit tests have no Docker daemon. Apart from
``infra/image.py`` so that the component stays readable; nothing in a stack run imports it."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from pulumi.runtime.rpc import unwrap_rpc_secret


def repository(image_name: str) -> str:
    """``registry:5000/repo:tag`` -> ``registry:5000/repo`` (a ``:`` after the last ``/``); the
    stand-in Docker provider (``tools/docker_provider.py``) finds its pushed digest by it."""
    head, _, last = image_name.rpartition("/")
    name = last.split(":", 1)[0]
    return f"{head}/{name}" if head else name


def mock_image_outputs(type_: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """Outputs a real ``docker.Image`` create would return, for ``pulumi.runtime.Mocks``.

    Offline renders and unit tests have no Docker daemon. The ``repoDigest`` returned here is a
    PLACEHOLDER: ``sha256`` of the image's non-secret inputs (name, build arguments, platform,
    push flag), deterministic so that renders are reproducible, never the digest of a real
    image. A pushed image gets ``<repo>@sha256:<hex>``; a local one the image-ID form
    ``sha256:<hex>``, as pulumi-docker returns for local builds.

    Args:
        type_: the resource type token; only ``docker:index/image:Image`` gets build outputs.
        inputs: the resource inputs as the mock receives them (camelCase).

    Returns:
        The inputs plus the computed outputs; other ``docker`` types get their inputs back.
    """
    outputs = dict(inputs)
    if type_ != "docker:index/image:Image":
        return outputs
    # Like the real resource, the outputs never echo the registry block (it holds the password).
    outputs.pop("registry", None)
    # Inputs that hold a secret (the registry block does) arrive wrapped as RPC secrets.
    plain = {key: unwrap_rpc_secret(value) for key, value in inputs.items()}
    image_name = str(plain.get("imageName", ""))
    build = plain.get("build") or {}
    skip_push = bool(plain.get("skipPush", False))
    # The registry block (with the password) stays out of the fingerprint: a digest is public.
    fingerprint = {
        "imageName": image_name,
        "args": dict(sorted((build.get("args") or {}).items())),
        "platform": build.get("platform"),
        "target": build.get("target"),
        "skipPush": skip_push,
    }
    digest = hashlib.sha256(json.dumps(fingerprint, sort_keys=True).encode()).hexdigest()
    registry_server = (plain.get("registry") or {}).get("server") or ""
    outputs.update(
        {
            "imageName": image_name,
            "baseImageName": image_name,
            "registryServer": registry_server,
            "context": build.get("context", "."),
            "dockerfile": build.get("dockerfile", "Dockerfile"),
            "platform": build.get("platform"),
            "repoDigest": (
                f"sha256:{digest}" if skip_push else f"{repository(image_name)}@sha256:{digest}"
            ),
        }
    )
    return outputs
