"""The recommended ``app.kubernetes.io/*`` labels, one definition for every object.

Selectors use only the stable subset (:func:`selector_labels`): a selector of a StatefulSet is
immutable, so it must not contain the version.
"""

from __future__ import annotations

from infra.config import StackConfig

APP = "tf-distributed"
MANAGED_BY = "pulumi"
COMPONENT_WORKER = "worker"


def selector_labels(cfg: StackConfig, component: str = COMPONENT_WORKER) -> dict[str, str]:
    """Labels that select one component's pods (stable across releases)."""
    return {
        "app.kubernetes.io/name": APP,
        "app.kubernetes.io/instance": cfg.app_name,
        "app.kubernetes.io/component": component,
    }


def standard_labels(cfg: StackConfig, component: str) -> dict[str, str]:
    """All recommended labels for an object of ``component`` (selector labels included)."""
    return {
        **selector_labels(cfg, component),
        "app.kubernetes.io/part-of": APP,
        "app.kubernetes.io/managed-by": MANAGED_BY,
        "app.kubernetes.io/version": cfg.image.tag,
    }


def metadata(cfg: StackConfig, name: str, component: str, namespaced: bool = True) -> dict:
    """``metadata`` of an object: explicit name (no Pulumi suffix), namespace, labels."""
    meta: dict = {"name": name, "labels": standard_labels(cfg, component)}
    if namespaced:
        meta["namespace"] = cfg.namespace
    return meta


def kwargs(manifest: dict) -> dict:
    """Top-level manifest fields as the SDK's keyword arguments (``roleRef`` -> ``role_ref``).

    Nested dictionaries stay in the Kubernetes (camelCase) spelling, which the SDK passes
    through unchanged, so builders and rendered manifests read the same.
    """
    out = {}
    for key, value in manifest.items():
        snake = "".join(f"_{c.lower()}" if c.isupper() else c for c in key)
        out[snake] = value
    return out
