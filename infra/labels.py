"""The recommended ``app.kubernetes.io/*`` labels, one definition for every object.

Selectors use only the stable subset (:func:`selector_labels`): a selector of a StatefulSet is
immutable, so it must not contain the version. Everything labels and metadata need of the stack
is its :class:`Identity`, the one input of every component that names and labels objects.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from infra.config import StackConfig

APP = "tf-distributed"
MANAGED_BY = "pulumi"
COMPONENT_WORKER = "worker"


@dataclass(frozen=True)
class Identity:
    """Whose objects these are: the app instance, its release, and the training namespace.

    Attributes:
        app_name: ``appName`` (``app.kubernetes.io/instance``, the prefix of object names).
        version: the image tag (``app.kubernetes.io/version``).
        namespace: the training namespace, of every namespaced object.
    """

    app_name: str
    version: str
    namespace: str

    @classmethod
    def of(cls, cfg: StackConfig) -> Identity:
        return cls(app_name=cfg.app_name, version=cfg.image.tag, namespace=cfg.namespace)


def selector_labels(ident: Identity, component: str = COMPONENT_WORKER) -> dict[str, str]:
    """Labels that select one component's pods (stable across releases)."""
    return {
        "app.kubernetes.io/name": APP,
        "app.kubernetes.io/instance": ident.app_name,
        "app.kubernetes.io/component": component,
    }


def standard_labels(ident: Identity, component: str) -> dict[str, str]:
    """All recommended labels for an object of ``component`` (selector labels included)."""
    return {
        **selector_labels(ident, component),
        "app.kubernetes.io/part-of": APP,
        "app.kubernetes.io/managed-by": MANAGED_BY,
        "app.kubernetes.io/version": ident.version,
    }


def metadata(
    ident: Identity,
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
        namespace=ident.namespace if namespaced else None,
        labels={**standard_labels(ident, component), **(labels or {})},
        annotations=dict(annotations) if annotations is not None else None,
    )


def selector(ident: Identity, component: str = COMPONENT_WORKER) -> k8s.meta.v1.LabelSelectorArgs:
    """A label selector (``matchLabels``) of one component's pods."""
    return k8s.meta.v1.LabelSelectorArgs(match_labels=selector_labels(ident, component))
