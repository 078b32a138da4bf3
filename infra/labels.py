"""The recommended ``app.kubernetes.io/*`` labels, one definition for every object.

Selectors use only the stable subset (:func:`selector_labels`): a selector of a StatefulSet is
immutable, so it must not contain the version.
"""

from __future__ import annotations

from collections.abc import Mapping

import pulumi
import pulumi_kubernetes as k8s

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


def metadata(
    cfg: StackConfig,
    name: str,
    component: str,
    *,
    namespaced: bool = True,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, pulumi.Input[str]] | None = None,
) -> k8s.meta.v1.ObjectMetaArgs:
    """``metadata`` of an object: explicit name (no Pulumi suffix), namespace, the standard
    labels of ``component`` plus ``labels``, and ``annotations``."""
    return k8s.meta.v1.ObjectMetaArgs(
        name=name,
        namespace=cfg.namespace if namespaced else None,
        labels={**standard_labels(cfg, component), **(labels or {})},
        annotations=dict(annotations) if annotations is not None else None,
    )


def selector(cfg: StackConfig, component: str = COMPONENT_WORKER) -> k8s.meta.v1.LabelSelectorArgs:
    """A label selector (``matchLabels``) of one component's pods."""
    return k8s.meta.v1.LabelSelectorArgs(match_labels=selector_labels(cfg, component))
