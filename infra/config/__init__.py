"""Typed stack configuration: parsed once, validated completely, before any resource exists.

Every key is defined once, in the key table (:mod:`infra.config.keys`: name, group, kind,
default, description); ``Pulumi.yaml``'s ``config:`` block and ``docs/config-reference.md`` are
generated from it. The Pulumi CLI applies those defaults and hands the program flat string
values (``"2"``, ``"true"``, JSON for arrays). :func:`parse_config` reads them by the table,
applies the rules between keys and builds frozen dataclasses, or refuses, in one
:class:`ConfigError` listing every problem, any value that breaks a rule: each line names the
key, the rule and the value received. :func:`load_config` reads the mapping from the Pulumi
runtime.

Secrets (kubeconfig, registry password, Grafana password) must be set with
``pulumi config set --secret``; they stay ``pulumi.Output`` secrets from here on.

The package, one concern a module:

- :mod:`~infra.config.errors`: :class:`ConfigError` and the form of its lines;
- :mod:`~infra.config.quantities`: Kubernetes quantities;
- :mod:`~infra.config.kinds`: what a key holds (type and rule) and how it is read;
- :mod:`~infra.config.clouds`: the per-cloud conventions ``clusterKind`` names;
- :mod:`~infra.config.key`, :mod:`~infra.config.keys_cluster`, :mod:`~infra.config.keys_run`,
  :mod:`~infra.config.keys`: the key table;
- :mod:`~infra.config.model`: the typed configuration;
- :mod:`~infra.config.reading`: one pass over the table (and unknown keys, secrets, providers);
- :mod:`~infra.config.checks`: the rules between keys; :mod:`~infra.config.image`: the image
  settings' rules (shared with ``infra/image.py``);
- :mod:`~infra.config.parse`: :func:`parse_config`;
- :mod:`~infra.config.declarations`: ``Pulumi.yaml`` as the CLI reads it;
- :mod:`~infra.config.runtime`: :func:`load_config`, from the Pulumi runtime.
"""

from infra.config.clouds import CLOUDS, CLUSTER_KINDS, Cloud, is_cloud
from infra.config.declarations import (
    PROJECT_FILE,
    Declaration,
    project_declarations,
    to_config_text,
)
from infra.config.errors import PROJECT, ConfigError
from infra.config.image import image_problems
from infra.config.key import (
    ALERT_FOR_MINUTES,
    NAMESPACE_MODES,
    RETENTION_POLICIES,
    Key,
)
from infra.config.keys import KEYS, SECRET_KEYS, default_of
from infra.config.kinds import SYSTEM_NAMESPACES, TOLERATION_EFFECTS
from infra.config.model import (
    AutoscalingConfig,
    ClusterConfig,
    ImageConfig,
    MonitoringConfig,
    QueueConfig,
    StackConfig,
    StorageConfig,
    Toleration,
    TrainingConfig,
    WorkerConfig,
)
from infra.config.parse import MINIKUBE_CONTEXT, parse_config
from infra.config.quantities import parse_quantity, scale_quantity
from infra.config.reading import DISABLE_DEFAULT_PROVIDERS, DISABLED_PROVIDERS, RENAMED_KEYS
from infra.config.runtime import load_config

__all__ = [
    "ALERT_FOR_MINUTES",
    "CLOUDS",
    "CLUSTER_KINDS",
    "DISABLED_PROVIDERS",
    "DISABLE_DEFAULT_PROVIDERS",
    "KEYS",
    "MINIKUBE_CONTEXT",
    "NAMESPACE_MODES",
    "PROJECT",
    "PROJECT_FILE",
    "RENAMED_KEYS",
    "RETENTION_POLICIES",
    "SECRET_KEYS",
    "SYSTEM_NAMESPACES",
    "TOLERATION_EFFECTS",
    "AutoscalingConfig",
    "Cloud",
    "ClusterConfig",
    "ConfigError",
    "Declaration",
    "ImageConfig",
    "Key",
    "MonitoringConfig",
    "QueueConfig",
    "StackConfig",
    "StorageConfig",
    "Toleration",
    "TrainingConfig",
    "WorkerConfig",
    "default_of",
    "image_problems",
    "is_cloud",
    "load_config",
    "parse_config",
    "parse_quantity",
    "project_declarations",
    "scale_quantity",
    "to_config_text",
]
