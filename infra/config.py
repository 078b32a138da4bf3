"""Typed stack configuration: parsed once, validated completely, before any resource exists.

Every key is declared in ``Pulumi.yaml`` (``config:`` block, with type, default and
description); the Pulumi CLI applies those defaults and hands the program flat string values
(``"2"``, ``"true"``, JSON for arrays). :func:`parse_config` turns that flat mapping into frozen
dataclasses and refuses, in one :class:`ConfigError` listing every problem, any value that breaks
a rule: each line names the key, the rule and the value received. :func:`load_config` reads the
mapping from the Pulumi runtime; it is the only function here that touches Pulumi.

Secrets (kubeconfig, registry password, Grafana password) must be set with
``pulumi config set --secret``; they stay ``pulumi.Output`` secrets from here on.
"""

from __future__ import annotations

import difflib
import ipaddress
import json
import math
import os
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import pulumi
import yaml

from trainer import contract

PROJECT = "tf-distributed"
"""Pulumi project name; project config keys are ``tf-distributed:<key>``."""
PROJECT_FILE = Path(__file__).resolve().parent.parent / "Pulumi.yaml"
DISABLE_DEFAULT_PROVIDERS = "pulumi:disable-default-providers"

CLUSTER_KINDS = ("minikube", "cloud")
NAMESPACE_MODES = ("create", "existing")
"""``namespaceMode``/``monitoringNamespaceMode``: ``create`` makes the namespace the stack's own
(labelled by it, deleted with it); ``existing`` deploys into a namespace the stack does not own
(no Namespace resource: its labels and its life are left to its owner)."""
SYSTEM_NAMESPACES = ("default", "kube-node-lease", "kube-public", "kube-system")
"""Namespaces every cluster has and needs; refused as the training or monitoring namespace (the
stack would label them, put a default-deny NetworkPolicy on their pods and own their fate)."""
RETENTION_POLICIES = ("Retain", "Delete")
RENAMED_KEYS = {
    "autoscalingCpuUtilization": "autoscalingCpuLimitUtilization (percent of cpuLimit, not of "
    "cpuRequest)",
    "autoscalingScaleDownWindowSeconds": "nothing: the HPA never scales a training run down "
    "(autoscalingScaleUpWindowSeconds paces scale-up)",
}
"""Keys earlier versions declared: the unknown-key error says what replaced them."""
TOLERATION_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
CHECKPOINT_URI_SCHEMES = ("gs://", "s3://")
MINIKUBE_CONTEXT = "minikube"
"""Kube context used for ``clusterKind: minikube`` when ``kubeContext`` is empty."""

SECRET_KEYS = frozenset({"kubeconfig", "imageRegistryPassword", "grafanaAdminPassword"})
"""Keys whose non-empty value must have been set with ``pulumi config set --secret``."""

# Kubernetes label key: optional DNS-subdomain prefix + "/" + name of [A-Za-z0-9._-] (<= 63).
_LABEL_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$")
_RESOURCE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[a-z0-9]([-a-z0-9_.]*[a-z0-9])?$")
_TOKEN = re.compile(r"^[A-Za-z0-9_.:/*?\[\]-]+$")
# Docker reference grammar, simplified: a repository is lowercase path components; a registry
# is a host with an optional port and path.
_IMAGE_REPOSITORY = re.compile(r"^[a-z0-9]+([._-][a-z0-9]+)*(/[a-z0-9]+([._-][a-z0-9]+)*)*$")
_IMAGE_REGISTRY = re.compile(r"^[A-Za-z0-9.-]+(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)*$")
_IMAGE_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
# A prebuilt image: [registry/]repository[:tag] and/or @sha256:<64 hex>.
_IMAGE_REFERENCE = re.compile(
    r"^(?P<name>([A-Za-z0-9.-]+(:[0-9]+)?/)?[a-z0-9]+([._-][a-z0-9]+)*(/[a-z0-9]+([._-][a-z0-9]+)*)*)"
    r"(:(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?(@(?P<digest>sha256:[0-9a-f]{64}))?$"
)
_IMAGE_PLATFORM = re.compile(r"^[a-z0-9]+/[a-z0-9_]+(/[a-z0-9]+)?$")
_CHART_VERSION = re.compile(r"^\d+\.\d+\.\d+$")
_CHART_REPOSITORY = re.compile(r"^https?://[^\s/?#]+(/[^\s?#]*)?$")
ALERT_FOR_MINUTES = (0, 60)
"""Range of ``monitoringAlertForMinutes`` (the alert rules' ``for``, in minutes); the rules'
own check (``infra.alerts.AlertThresholds``) uses it too."""
# Kubernetes resource.Quantity: a signed decimal number and an optional suffix.
_QUANTITY = re.compile(
    r"^(?P<num>\+?(\d+(\.\d*)?|\.\d+))(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?\d+)?$"
)
_SUFFIX = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
    **{s: Decimal(1024) ** (i + 1) for i, s in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"))},
}


class ConfigError(pulumi.RunError, ValueError):
    """The stack configuration breaks a rule; one line per problem: ``<key>: <rule>; got <v>``.

    A :class:`pulumi.RunError`, so ``pulumi preview``/``up`` print the message alone, without a
    Python traceback.
    """

    def __init__(self, problems: list[str]) -> None:
        self.problems = tuple(problems)
        super().__init__(
            "invalid stack configuration (nothing was registered):\n  " + "\n  ".join(problems)
        )


def _millis(cores: Decimal) -> int:
    """CPU cores as whole millicores, at least 1 (an invalid quantity reads as 0)."""
    return max(1, math.ceil(cores * 1000))


def parse_quantity(text: str) -> Decimal:
    """Value of a Kubernetes quantity (``500m`` -> 0.5, ``2Gi`` -> 2147483648).

    Raises:
        ValueError: ``text`` is not a quantity.
    """
    match = _QUANTITY.match(text)
    if not match:
        raise ValueError(text)
    suffix = match["suffix"] or ""
    try:
        scale = _SUFFIX[suffix] if suffix in _SUFFIX else Decimal(f"1{suffix}")
        return Decimal(match["num"]) * scale
    except InvalidOperation:
        raise ValueError(text) from None


def scale_quantity(text: str | int, factor: int) -> str:
    """A Kubernetes quantity times a whole ``factor``, in the same suffix (``16Gi`` x 4 ->
    ``64Gi``, ``500m`` x 3 -> ``1500m``): exact, with no rounding through floats.

    Raises:
        ValueError: ``text`` is not a quantity.
    """
    match = _QUANTITY.match(str(text))
    if not match:
        raise ValueError(text)
    number = Decimal(match["num"]) * factor
    # 'f' never writes an exponent (Decimal('1E+2') -> '100'); drop a trailing '.0'.
    digits = format(number.normalize(), "f") if number else "0"
    return f"{digits}{match['suffix'] or ''}"


# --- Typed configuration. ---


@dataclass(frozen=True)
class Toleration:
    """A pod toleration from ``key[=value]:Effect`` (no value: ``operator: Exists``)."""

    key: str
    value: str | None
    effect: str

    def manifest(self) -> dict[str, str]:
        out = {"key": self.key, "operator": "Exists" if self.value is None else "Equal"}
        if self.value is not None:
            out["value"] = self.value
        out["effect"] = self.effect
        return out


@dataclass(frozen=True)
class ClusterConfig:
    """Which cluster the explicit Kubernetes provider talks to.

    Attributes:
        kind: ``minikube`` or ``cloud``.
        context: kube context name; ``None`` = the kubeconfig's current context.
        kubeconfig: secret kubeconfig contents; ``None`` = ``~/.kube/config`` / ``KUBECONFIG``.
        domain: cluster DNS domain (default ``cluster.local``).
        api_server_cidrs: CIDRs of the API server endpoints (egress allowed on every stack:
            the trainer reads and scales its StatefulSet and deletes its own pod).
        api_server_ports: TCP ports of those endpoints.
        dns_egress_cidrs: resolvers outside kube-dns (NodeLocal DNSCache, a metadata server)
            the pods may query on port 53.
        egress_https_cidrs: CIDRs the workers may reach on TCP 443 (dataset downloads, object
            stores); empty = no egress beyond peers, DNS and the API server.
    """

    kind: str
    context: str | None
    kubeconfig: pulumi.Output[str] | None
    domain: str
    api_server_cidrs: tuple[str, ...]
    api_server_ports: tuple[int, ...]
    egress_https_cidrs: tuple[str, ...] = ()
    dns_egress_cidrs: tuple[str, ...] = ()


@dataclass(frozen=True)
class WorkerConfig:
    """The worker StatefulSet's pods.

    Attributes:
        replicas: workers (:data:`trainer.contract.rules.REPLICAS`); the HPA's starting point
            when autoscaling is on.
        gpus: GPUs per worker (0-16; 0 = CPU only, no GPU limit, selector or tolerations).
        gpu_resource: extended resource name of a GPU (default ``nvidia.com/gpu``).
        cpu_request, cpu_limit, memory_request, memory_limit: Kubernetes quantities.
        gpu_node_selector: node labels GPU workers must match (``key=value`` each).
        gpu_tolerations: taints GPU workers tolerate.
        termination_grace_seconds: SIGTERM-to-SIGKILL time for a preemption checkpoint
            (30-3600 s).
        grpc_port, metrics_port: container ports (1024-65535; non-root cannot bind below).
    """

    replicas: int
    gpus: int
    gpu_resource: str
    cpu_request: str
    cpu_limit: str
    memory_request: str
    memory_limit: str
    gpu_node_selector: tuple[tuple[str, str], ...]
    gpu_tolerations: tuple[Toleration, ...]
    termination_grace_seconds: int
    grpc_port: int
    metrics_port: int


@dataclass(frozen=True)
class StorageConfig:
    """Shared checkpoint storage: one ReadWriteMany claim, or an object-store URI.

    Attributes:
        storage_class: StorageClass of the claim (must support ReadWriteMany).
        size: claim size, a Kubernetes quantity of bytes (e.g. ``10Gi``).
        uri: ``gs://`` or ``s3://`` checkpoint location; ``None`` = the shared claim.
        retention: ``Retain`` keeps the claim (and its checkpoints) and its namespace on
            ``pulumi destroy``; ``Delete`` lets ``pulumi destroy`` delete them (and the
            StorageClass's reclaim policy then decides the volume's fate).
    """

    storage_class: str
    size: str
    uri: str | None
    retention: str


@dataclass(frozen=True)
class TrainingConfig:
    """The stack's settings of the trainer's flags and of its run.

    The flags' meaning and rules are :class:`trainer.contract.flags.TrainerFlags`'s (the stack
    reads each key with the flag's rule; ``infra.pod.trainer_args`` builds the flags).

    Attributes:
        dataset: ``synthetic``, ``mnist`` or a path/URI of the data.
        epochs, batch_size, steps_per_epoch, checkpoint_every, collective: the flags.
        collective_timeout_seconds, heartbeat_timeout_seconds: the timeout flags, in whole
            seconds (``Pulumi.yaml`` declares integers).
        run_id: identity of the run (its checkpoint directory and ``DONE``); a new one is a
            new run from step 0.
        on_done: ``scale-to-zero`` or ``idle`` (``--on-done``;
            :data:`trainer.contract.rules.ON_DONE_POD_MODES`).
        precision: ``auto``, ``fp32``, ``bf16`` or ``fp16`` (``fp16`` needs GPUs).
    """

    dataset: str
    epochs: int
    batch_size: int
    steps_per_epoch: int
    checkpoint_every: int
    collective: str
    collective_timeout_seconds: int
    heartbeat_timeout_seconds: int
    run_id: str = "1"
    on_done: str = "scale-to-zero"
    precision: str = "auto"


@dataclass(frozen=True)
class AutoscalingConfig:
    """HorizontalPodAutoscaler (``autoscaling/v2``) on the worker StatefulSet.

    Attributes:
        enabled: create the HPA (the trainer then follows the live replica count).
        min_replicas, max_replicas: min <= max, both within
            :data:`trainer.contract.rules.REPLICAS`.
        cpu_limit_utilization: scale up above this average CPU use, percent of the CPU
            limit (1-100); :attr:`cpu_utilization` converts it to the HPA's measure.
        scale_up_window_seconds: scale-up stabilization window and policy period (60-1800 s).
        cpu_request_millis, cpu_limit_millis: the workers' CPU request and limit.
    """

    enabled: bool
    min_replicas: int
    max_replicas: int
    cpu_limit_utilization: int
    scale_up_window_seconds: int
    cpu_request_millis: int
    cpu_limit_millis: int

    @property
    def cpu_utilization(self) -> int:
        """The HPA's ``averageUtilization``: percent of the CPU *request*, as Kubernetes counts.

        A synchronous worker runs at its limit, i.e. ``limit / request`` x 100 % of its request
        (200 % for 500m/1): a target given against the request alone (say 80 %) is exceeded
        by every healthy worker and resizes the job within minutes of every start.
        """
        return math.ceil(
            self.cpu_limit_utilization * self.cpu_limit_millis / self.cpu_request_millis
        )


@dataclass(frozen=True)
class MonitoringConfig:
    """The monitoring stack (kube-prometheus-stack), only deployed when ``enabled``; ``install``
    says whether this stack installs it or uses the cluster's existing install."""

    enabled: bool
    namespace: str = "monitoring"
    chart_version: str = ""
    install: bool = True
    grafana_admin_password: pulumi.Output[str] | None = None
    chart_repository: str = ""
    values: Mapping[str, Any] = field(default_factory=dict)
    """Extra chart values from ``monitoringValuesFile`` (empty without one)."""
    alert_for_minutes: int = 0
    namespace_mode: str = "create"

    @property
    def creates_namespace(self) -> bool:
        """The installing stack creates (and owns) the monitoring namespace; a stack that does
        not install, or ``monitoringNamespaceMode: existing``, never creates it."""
        return self.install and self.namespace_mode == "create"


@dataclass(frozen=True)
class ImageConfig:
    """The trainer image: built by the stack (see ``infra/image.py``), or prebuilt.

    Attributes:
        reference: a prebuilt image to deploy instead of building one (``imageReference``);
            ``None`` builds the Dockerfile. The build settings below are then unused.
    """

    reference: str | None = None
    repository: str = "tf-distributed-trainer"
    tag: str = "0.1.0"
    registry: str | None = None
    registry_username: str | None = None
    registry_password: pulumi.Output[str] | None = None
    docker_host: str | None = None
    docker_cert_path: str | None = None
    platform: str = "linux/amd64"


@dataclass(frozen=True)
class StackConfig:
    """The whole validated configuration of one stack.

    Attributes:
        app_name: prefix of every Kubernetes object name (DNS label, <= 40 characters).
        namespace: namespace of the training objects (never a system namespace).
        namespace_mode: ``create`` (the stack creates and owns the namespace) or ``existing``
            (it deploys into a namespace it does not own, see :data:`NAMESPACE_MODES`).
        project, stack: the Pulumi project and stack names: with ``runId`` they name the run's
            checkpoint directory (``infra.pod.checkpoint_dir``), so no two stacks share one.
    """

    app_name: str
    namespace: str
    cluster: ClusterConfig
    workers: WorkerConfig
    storage: StorageConfig
    training: TrainingConfig
    autoscaling: AutoscalingConfig
    monitoring: MonitoringConfig
    project: str
    stack: str
    image: ImageConfig = field(default_factory=ImageConfig)
    namespace_mode: str = "create"

    @property
    def owns_namespace(self) -> bool:
        """The stack creates the training namespace, labels it and deletes it on destroy."""
        return self.namespace_mode == "create"

    @property
    def statefulset_name(self) -> str:
        return f"{self.app_name}-worker"

    @property
    def service_name(self) -> str:
        return f"{self.app_name}-workers"

    @property
    def service_account_name(self) -> str:
        return f"{self.app_name}-worker"

    @property
    def checkpoint_claim_name(self) -> str:
        return f"{self.app_name}-checkpoints"

    @property
    def retains_checkpoint_claim(self) -> bool:
        """``pulumi destroy`` keeps the checkpoint claim (and the namespace that holds it).

        True with ``checkpointRetention: Retain`` and a claim (no ``checkpointUri``): deleting
        the namespace would delete the claim, so a namespace the stack owns is
        ``retain_on_delete`` as well (:attr:`retains_namespace`).
        """
        return self.storage.uri is None and self.storage.retention == "Retain"

    @property
    def retains_namespace(self) -> bool:
        """``pulumi destroy`` keeps the namespace the stack created, for the claim it holds."""
        return self.owns_namespace and self.retains_checkpoint_claim

    @property
    def replicas_source(self) -> str:
        """``api`` when an autoscaler may change the replicas under the pods, else ``env``."""
        return "api" if self.autoscaling.enabled else "env"


# --- Parsing. ---


class _Reader:
    """Reads typed values out of the flat string mapping, collecting every problem."""

    def __init__(self, raw: Mapping[str, Any]) -> None:
        self.raw = raw
        self.problems: list[str] = []
        self.read: set[str] = set()

    def fail(self, key: str, rule: str, value: Any) -> None:
        self.problems.append(f"{PROJECT}:{key}: {rule}; got {value!r}")

    def _get(self, key: str) -> Any:
        self.read.add(key)
        full = f"{PROJECT}:{key}"
        if full not in self.raw:
            self.problems.append(
                f"{full}: required (declared in Pulumi.yaml; the Pulumi CLI >= 3.44 applies "
                "its default); got no value"
            )
            return None
        return self.raw[full]

    def string(
        self, key: str, pattern: re.Pattern[str] | None = None, rule: str = "", empty: bool = False
    ) -> str:
        value = self._get(key)
        if value is None:
            return ""
        text = str(value)
        if text == "" and empty:
            return ""
        if text == "" or (pattern is not None and not pattern.match(text)):
            self.fail(key, rule or "must be a non-empty string", value)
        return text

    def choice(self, key: str, choices: tuple[str, ...]) -> str:
        value = self._get(key)
        if value is not None and value not in choices:
            self.fail(key, f"must be one of {', '.join(choices)}", value)
        return str(value) if value is not None else choices[0]

    def integer(self, key: str, lo: int, hi: int) -> int:
        return self.within(key, contract.Interval(lo, hi))

    def within(self, key: str, rule: contract.Interval) -> int:
        """A whole number within ``rule`` (a contract rule where the trainer applies it too);
        out of bounds it is still returned, for the cross-field checks."""
        rule = rule.whole()  # Pulumi.yaml declares the numeric keys as integers
        value = self._get(key)
        if value is None:
            return int(rule.lo)
        try:
            number = int(str(value).strip())
        except ValueError:
            self.fail(key, f"must be {rule.text}", value)
            return int(rule.lo)
        if not rule.contains(number):
            self.fail(key, f"must be {rule.text}", value)
        return number

    def boolean(self, key: str) -> bool:
        value = self._get(key)
        if isinstance(value, bool):
            return value
        if value in ("true", "false"):
            return value == "true"
        if value is not None:
            self.fail(key, "must be a boolean (true or false)", value)
        return False

    def dns_label(self, key: str) -> str:
        """A lowercase RFC 1123 label of at most 63 characters (namespace names)."""
        text = self.string(key, contract.DNS_LABEL, "must be a lowercase DNS label (<= 63)")
        if len(text) > 63:
            self.fail(key, "must be at most 63 characters", text)
        return text

    def namespace(self, key: str, check: bool = True) -> str:
        """A namespace name: :meth:`dns_label`, and (``check``) never a system namespace."""
        text = self.dns_label(key)
        if check and text in SYSTEM_NAMESPACES:
            self.fail(
                key,
                f"must not be a Kubernetes system namespace ({', '.join(SYSTEM_NAMESPACES)})",
                text,
            )
        return text

    def _array(self, key: str) -> tuple[Any, Any]:
        """``(raw value, parsed items)``; items are ``None`` when the value is no JSON array
        (the CLI hands arrays to the program as JSON text; tests may pass lists)."""
        value = self._get(key)
        if not isinstance(value, str):
            return value, value
        try:
            return value, json.loads(value) if value.strip() else []
        except ValueError:
            return value, None

    def string_list(self, key: str) -> tuple[str, ...]:
        value, items = self._array(key)
        if value is None:
            return ()
        if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
            self.fail(key, "must be an array of strings (JSON when given as text)", value)
            return ()
        return tuple(items)

    def int_list(self, key: str, lo: int, hi: int) -> tuple[int, ...]:
        value, items = self._array(key)
        if value is None:
            return ()
        ok = isinstance(items, list) and all(
            isinstance(i, int) and not isinstance(i, bool) and lo <= i <= hi for i in items
        )
        if not ok:
            self.fail(key, f"must be an array of integers in [{lo}, {hi}]", value)
            return ()
        return tuple(items)

    def cidr_list(self, key: str, example: str) -> tuple[str, ...]:
        """An array of CIDRs (host bits zero), e.g. ``example``."""
        cidrs = self.string_list(key)
        for cidr in cidrs:
            try:
                ipaddress.ip_network(cidr, strict=True)
            except ValueError:
                self.fail(key, f"each entry must be a CIDR such as {example!r}", cidr)
        return cidrs

    def quantity(self, key: str, what: str) -> tuple[str, Decimal]:
        text = self.string(key)
        try:
            amount = parse_quantity(text)
        except ValueError:
            self.fail(
                key, f"must be a Kubernetes quantity of {what} (e.g. {_EXAMPLES[what]})", text
            )
            return text, Decimal(0)
        if amount <= 0:
            self.fail(key, f"must be a positive quantity of {what}", text)
        return text, amount


_EXAMPLES = {"CPU": "'500m' or '2'", "memory": "'512Mi' or '4Gi'", "storage": "'10Gi'"}


def _parse_toleration(reader: _Reader, key: str, text: str) -> Toleration | None:
    head, sep, effect = text.rpartition(":")
    name, eq, value = head.partition("=")
    if (
        not sep
        or effect not in TOLERATION_EFFECTS
        or not _label_key_ok(name)
        or (eq and not _LABEL_VALUE.match(value))
    ):
        reader.fail(
            key,
            f"each entry must be 'key[=value]:Effect' with Effect one of "
            f"{', '.join(TOLERATION_EFFECTS)}",
            text,
        )
        return None
    return Toleration(key=name, value=value if eq else None, effect=effect)


def _label_key_ok(key: str) -> bool:
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not contract.DNS_SUBDOMAIN.match(prefix)):
        return False
    return bool(name) and bool(_LABEL_NAME.match(name))


def _check_secrets(
    reader: _Reader, secret_keys: Collection[str], secrets: Mapping[str, pulumi.Output[str]]
) -> tuple[dict[str, pulumi.Output[str] | None], frozenset[str]]:
    """The secret values by short key, and which secret keys have a non-empty value."""
    out: dict[str, pulumi.Output[str] | None] = {}
    set_keys: set[str] = set()
    for key in sorted(SECRET_KEYS):
        value = reader._get(key)
        if value in ("", None):
            out[key] = None
            continue
        set_keys.add(key)
        if f"{PROJECT}:{key}" not in secret_keys:
            # Never echo the value: it was meant to be secret.
            reader.problems.append(
                f"{PROJECT}:{key}: must be set with 'pulumi config set --secret {key}' "
                "(encrypted in the stack file); got a plaintext value"
            )
            out[key] = None
        else:
            out[key] = secrets.get(key)
    return out, frozenset(set_keys)


def image_problems(cfg: ImageConfig, *, push: bool) -> list[str]:
    """Every rule the image settings break, one ``<key>: <rule>; got <value>`` line each.

    The one definition of the image rules: :func:`parse_config` merges these into its problems
    (so they stop a run before any resource exists) and :func:`infra.image.image_args` refuses
    the same when called directly.

    Args:
        cfg: the image settings.
        push: the image is pushed to ``cfg.registry`` (``clusterKind: cloud``): a registry is
            then required, and a registry user and password go together.
    """
    problems: list[str] = []
    if cfg.reference is not None:
        return _reference_problems(cfg.reference, pinned=push)

    def check(key: str, value: str | None, pattern: re.Pattern[str], rule: str) -> None:
        if value is None or not pattern.match(value):
            problems.append(f"{PROJECT}:{key}: must be {rule}; got {value!r}")

    check(
        "imageRepository", cfg.repository, _IMAGE_REPOSITORY, "a lowercase Docker repository path"
    )
    check("imageTag", cfg.tag, _IMAGE_TAG, "a Docker tag ([A-Za-z0-9_.-], at most 128)")
    if cfg.tag == "latest":
        problems.append(f"{PROJECT}:imageTag: must be a fixed version, not 'latest'; got 'latest'")
    check("imagePlatform", cfg.platform, _IMAGE_PLATFORM, "'os/arch[/variant]', e.g. linux/arm64")
    if not push:
        return problems
    if not cfg.registry:
        problems.append(
            f"{PROJECT}:imageRegistry: required when clusterKind is 'cloud' (images are pushed); "
            f"got {cfg.registry or ''!r}"
        )
    else:
        check("imageRegistry", cfg.registry, _IMAGE_REGISTRY, "a registry 'host[:port][/path]'")
    has_user = bool(cfg.registry_username)
    has_password = cfg.registry_password is not None
    if has_user != has_password:
        problems.append(
            f"{PROJECT}:imageRegistryUsername/imageRegistryPassword: set both, or neither "
            "to use the host's `docker login`; got "
            f"username {'set' if has_user else 'unset'}, "
            f"password {'set' if has_password else 'unset'}"
        )
    return problems


def _values_file(r: _Reader, key: str) -> dict[str, Any]:
    """The chart values in the YAML file ``key`` names (relative to the project directory);
    empty when the key is. The file must hold a mapping."""
    name = r.string(key, empty=True)
    if not name:
        return {}
    path = PROJECT_FILE.parent / name
    try:
        values = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as err:
        reason = err.strerror if isinstance(err, OSError) else "not valid YAML"
        r.fail(key, f"must name a readable YAML file of chart values ({reason})", name)
        return {}
    if not isinstance(values, dict):
        r.fail(key, "must name a YAML file holding a mapping of chart values", name)
        return {}
    return values


def _reference_problems(reference: str, *, pinned: bool) -> list[str]:
    """The rules of ``imageReference``: a Docker reference, never ``latest``, and pinned by
    digest where ``pinned`` (cloud stacks, whose nodes pull from a registry)."""
    key = f"{PROJECT}:imageReference"
    match = _IMAGE_REFERENCE.match(reference)
    if match is None:
        return [
            f"{key}: must be an image reference '[registry/]repo[:tag][@sha256:<64 hex>]'; "
            f"got {reference!r}"
        ]
    if match["tag"] is None and match["digest"] is None:
        return [
            f"{key}: must name a tag or a digest (an untagged name means 'latest'); "
            f"got {reference!r}"
        ]
    if match["tag"] == "latest":
        return [f"{key}: must be a fixed version, not 'latest'; got {reference!r}"]
    if pinned and match["digest"] is None:
        return [
            f"{key}: must be pinned by digest ('...@sha256:<64 hex>') when clusterKind is "
            f"'cloud'; got {reference!r}"
        ]
    return []


def parse_config(
    raw: Mapping[str, Any],
    secret_keys: Collection[str] = (),
    secrets: Mapping[str, pulumi.Output[str]] | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    project: str | None = None,
    stack: str | None = None,
) -> StackConfig:
    """Validate the flat configuration and build the typed :class:`StackConfig`.

    Args:
        raw: fully qualified keys (``tf-distributed:replicas``) to values as the Pulumi runtime
            gives them (strings; arrays as JSON text). Other namespaces are ignored, except
            ``pulumi:disable-default-providers``, which must include ``kubernetes`` (or ``*``).
        secret_keys: fully qualified keys whose values are secrets.
        secrets: the secret values as ``pulumi.Output`` (from ``Config.get_secret``), keyed by
            the short key; only read when the whole configuration is valid.
        environ: the process environment (default ``os.environ``); only ``DOCKER_HOST`` is
            read, for minikube stacks that build their image.
        project, stack: the Pulumi project and stack names (default: the running program's,
            ``pulumi.get_project()`` and ``pulumi.get_stack()``); each must be a path segment
            (:data:`trainer.contract.RUN_ID`), as it names the checkpoint directory.

    Raises:
        ConfigError: one or more values break a rule; nothing has been registered.
    """
    r = _Reader(raw)

    app_name = r.string("appName", contract.DNS_LABEL, "must be a lowercase DNS label")
    if len(app_name) > 40:
        r.fail("appName", "must be at most 40 characters (pod names append suffixes)", app_name)
    namespace = r.namespace("namespace")
    namespace_mode = r.choice("namespaceMode", NAMESPACE_MODES)

    # Cluster.
    kind = r.choice("clusterKind", CLUSTER_KINDS)
    context = r.string("kubeContext", empty=True) or None
    secret_values, secrets_set = _check_secrets(r, secret_keys, secrets or {})
    has_kubeconfig = "kubeconfig" in secrets_set
    if kind == "cloud" and context is None and not has_kubeconfig:
        r.fail(
            "kubeContext",
            "clusterKind 'cloud' needs a kube context and/or a secret kubeconfig "
            "(tf-distributed:kubeconfig)",
            "",
        )
    if kind == "minikube" and context is None and not has_kubeconfig:
        context = MINIKUBE_CONTEXT
    domain = r.string("clusterDomain", contract.DNS_SUBDOMAIN, "must be a lowercase DNS domain")
    cidrs = r.cidr_list("apiServerCidrs", "10.0.0.1/32")
    api_ports = r.int_list("apiServerPorts", 1, 65535)
    if not cidrs or not api_ports:
        r.fail(
            "apiServerCidrs",
            "must list the API server's endpoint CIDRs (with apiServerPorts): the workers call "
            "it for their own StatefulSet (scale to zero when done, rollouts, live replicas)",
            list(cidrs),
        )
    egress_cidrs = r.cidr_list("egressHttpsCidrs", "0.0.0.0/0")
    dns_cidrs = r.cidr_list("dnsEgressCidrs", "169.254.20.10/32")

    # Workers.
    replicas = r.within("replicas", contract.REPLICAS)
    gpus = r.integer("gpusPerWorker", 0, 16)
    gpu_resource = r.string(
        "gpuResourceName", _RESOURCE_NAME, "must be an extended resource name 'domain/name'"
    )
    cpu_request, cpu_req_v = r.quantity("cpuRequest", "CPU")
    cpu_limit, cpu_lim_v = r.quantity("cpuLimit", "CPU")
    if cpu_req_v > 0 and cpu_lim_v > 0 and cpu_lim_v < cpu_req_v:
        r.fail("cpuLimit", f"must be >= cpuRequest ({cpu_request})", cpu_limit)
    memory_request, mem_req_v = r.quantity("memoryRequest", "memory")
    memory_limit, mem_lim_v = r.quantity("memoryLimit", "memory")
    if mem_req_v > 0 and mem_lim_v > 0 and mem_lim_v < mem_req_v:
        r.fail("memoryLimit", f"must be >= memoryRequest ({memory_request})", memory_limit)
    selector: list[tuple[str, str]] = []
    for entry in r.string_list("gpuNodeSelector"):
        k, eq, v = entry.partition("=")
        if not eq or not _label_key_ok(k) or not _LABEL_VALUE.match(v):
            r.fail("gpuNodeSelector", "each entry must be a node label 'key=value'", entry)
        else:
            selector.append((k, v))
    tolerations = tuple(
        t
        for t in (
            _parse_toleration(r, "gpuTolerations", e) for e in r.string_list("gpuTolerations")
        )
        if t is not None
    )
    grace = r.integer("terminationGracePeriodSeconds", 30, 3600)
    grpc_port = r.integer("grpcPort", 1024, 65535)
    metrics_port = r.integer("metricsPort", 1024, 65535)
    if grpc_port == metrics_port:
        r.fail("metricsPort", f"must differ from grpcPort ({grpc_port})", metrics_port)

    # Storage.
    storage_class = r.string(
        "checkpointStorageClass",
        contract.DNS_SUBDOMAIN,
        "must be a StorageClass name (DNS subdomain)",
    )
    size, size_v = r.quantity("checkpointSize", "storage")
    if size_v and size_v != size_v.to_integral_value():
        r.fail("checkpointSize", "must be a whole number of bytes (e.g. '10Gi')", size)
    uri = r.string("checkpointUri", empty=True) or None
    if uri is not None and (
        not uri.startswith(CHECKPOINT_URI_SCHEMES) or len(uri) <= 5 or " " in uri
    ):
        r.fail("checkpointUri", "must be empty or a gs://bucket/path or s3://bucket/path URI", uri)
    retention = r.choice("checkpointRetention", RETENTION_POLICIES)

    # The run: <checkpoint root>/<project>/<stack>/<runId>.
    project = pulumi.get_project() if project is None else project
    stack = pulumi.get_stack() if stack is None else stack
    for what, name in (("project", project), ("stack", stack)):
        if not contract.RUN_ID.match(name):
            r.problems.append(
                f"pulumi {what} name: must be {contract.RUN_ID_RULE} (it names the checkpoint "
                f"directory); got {name!r}"
            )
    run_id = r.string("runId", contract.RUN_ID, f"must be {contract.RUN_ID_RULE}")
    on_done = r.choice("onDone", contract.ON_DONE_POD_MODES)

    # Training.
    dataset = r.string("dataset", _TOKEN, "must be 'synthetic', 'mnist' or a path/URI")
    # The trainer's flags' own bounds (trainer/contract/flags.py): what the stack accepts the
    # pods accept.
    epochs = r.within("epochs", contract.EPOCHS)
    batch_size = r.within("batchSize", contract.BATCH_SIZE)
    steps_per_epoch = r.within("stepsPerEpoch", contract.STEPS_PER_EPOCH)
    checkpoint_every = r.within("checkpointEvery", contract.CHECKPOINT_EVERY)
    remote = [v for v in (dataset, uri or "") if v == "mnist" or v.startswith(("gs:", "s3:"))]
    if remote and not egress_cidrs:
        r.fail(
            "egressHttpsCidrs",
            f"must allow HTTPS egress for {remote[0]!r} (dataset or checkpointUri fetched over "
            "the network; the namespace denies all other egress)",
            [],
        )
    collective = r.choice("collective", contract.COLLECTIVES)
    if collective == "nccl" and gpus == 0:
        r.fail("collective", "'nccl' needs gpusPerWorker >= 1", collective)
    collective_timeout = r.within("collectiveTimeoutSeconds", contract.COLLECTIVE_TIMEOUT)
    heartbeat_timeout = r.within("heartbeatTimeoutSeconds", contract.HEARTBEAT_TIMEOUT)
    precision = r.choice("precision", contract.PRECISIONS)
    if precision == "fp16" and gpus == 0:
        r.fail("precision", "'fp16' needs gpusPerWorker >= 1 (CPUs only emulate it)", precision)
    if collective_timeout >= grace:
        r.fail(
            "terminationGracePeriodSeconds",
            f"must exceed collectiveTimeoutSeconds ({collective_timeout}) so a preempted "
            "worker can finish its checkpoint",
            grace,
        )

    # Autoscaling.
    hpa_on = r.boolean("autoscalingEnabled")
    hpa_min = r.within("autoscalingMinReplicas", contract.REPLICAS)
    hpa_max = r.within("autoscalingMaxReplicas", contract.REPLICAS)
    cpu_target = r.integer("autoscalingCpuLimitUtilization", 1, 100)
    window = r.integer("autoscalingScaleUpWindowSeconds", 60, 1800)
    if hpa_on:
        if hpa_min > hpa_max:
            r.fail(
                "autoscalingMinReplicas",
                f"must be <= autoscalingMaxReplicas ({hpa_max})",
                hpa_min,
            )
        elif not hpa_min <= replicas <= hpa_max:
            r.fail(
                "replicas",
                f"must lie within [autoscalingMinReplicas, autoscalingMaxReplicas] = "
                f"[{hpa_min}, {hpa_max}] when autoscaling is enabled",
                replicas,
            )

    # Monitoring.
    mon_on = r.boolean("monitoringEnabled")
    mon_install = r.boolean("monitoringInstall")
    # Checked only where used: with monitoring off the key names nothing on the cluster.
    mon_ns = r.namespace("monitoringNamespace", check=mon_on)
    mon_ns_mode = r.choice("monitoringNamespaceMode", NAMESPACE_MODES)
    if mon_on and mon_ns == namespace:
        r.fail("monitoringNamespace", f"must differ from namespace ({namespace})", mon_ns)
    chart_version = r.string(
        "monitoringChartVersion",
        _CHART_VERSION,
        "must be an exact chart version 'MAJOR.MINOR.PATCH'",
    )
    chart_repository = r.string(
        "monitoringChartRepository",
        _CHART_REPOSITORY,
        "must be the http(s):// URL of a Helm chart repository",
    )
    chart_values = _values_file(r, "monitoringValuesFile")
    alert_for = r.integer("monitoringAlertForMinutes", *ALERT_FOR_MINUTES)

    # Image: read here, judged by image_problems (shared with infra/image.py).
    image = ImageConfig(
        reference=r.string("imageReference", empty=True) or None,
        repository=r.string("imageRepository", empty=True),
        tag=r.string("imageTag", empty=True),
        registry=r.string("imageRegistry", empty=True) or None,
        registry_username=r.string("imageRegistryUsername", empty=True) or None,
        registry_password=secret_values["imageRegistryPassword"],
        docker_host=r.string("dockerHost", empty=True) or None,
        docker_cert_path=r.string("dockerCertPath", empty=True) or None,
        platform=r.string("imagePlatform", empty=True),
    )
    r.problems += image_problems(image, push=kind == "cloud")
    docker_env = (os.environ if environ is None else environ).get("DOCKER_HOST", "")
    if kind == "minikube" and image.reference is None and not image.docker_host and not docker_env:
        # The local image must land in minikube's own daemon: with the host's daemon the pods
        # end in ErrImageNeverPull and `pulumi up` waits out the StatefulSet timeout.
        r.fail(
            "dockerHost",
            "a minikube stack that builds its image needs minikube's Docker daemon: run "
            "`eval $(minikube docker-env)` (sets DOCKER_HOST) or set dockerHost",
            "",
        )

    # Default providers: nothing may land on whatever cluster the shell points at.
    disabled = raw.get(DISABLE_DEFAULT_PROVIDERS)
    try:
        disabled_list = json.loads(disabled) if isinstance(disabled, str) else disabled
    except ValueError:
        disabled_list = None
    if not isinstance(disabled_list, list) or not (
        "kubernetes" in disabled_list or "*" in disabled_list
    ):
        r.problems.append(
            f"{DISABLE_DEFAULT_PROVIDERS}: must list 'kubernetes' (or '*') in the stack file; "
            f"got {disabled!r}"
        )

    for full_key in sorted(raw):
        namespace_, _, key = full_key.partition(":")
        if namespace_ == PROJECT and key not in r.read:
            if key in RENAMED_KEYS:
                hint = f"; replaced by {RENAMED_KEYS[key]}"
            else:
                # A typo of a declared key (replica, epoch): name the key it most likely meant.
                near = difflib.get_close_matches(key, sorted(r.read), n=1, cutoff=0.75)
                hint = f"; did you mean {PROJECT}:{near[0]}?" if near else ""
            r.problems.append(
                f"{full_key}: unknown key (not declared in Pulumi.yaml{hint}); "
                f"got {raw[full_key]!r}"
            )

    if r.problems:
        raise ConfigError(r.problems)

    return StackConfig(
        app_name=app_name,
        namespace=namespace,
        namespace_mode=namespace_mode,
        cluster=ClusterConfig(
            kind=kind,
            context=context,
            kubeconfig=secret_values["kubeconfig"],
            domain=domain,
            api_server_cidrs=cidrs,
            api_server_ports=api_ports,
            egress_https_cidrs=egress_cidrs,
            dns_egress_cidrs=dns_cidrs,
        ),
        workers=WorkerConfig(
            replicas=replicas,
            gpus=gpus,
            gpu_resource=gpu_resource,
            cpu_request=cpu_request,
            cpu_limit=cpu_limit,
            memory_request=memory_request,
            memory_limit=memory_limit,
            gpu_node_selector=tuple(selector),
            gpu_tolerations=tolerations,
            termination_grace_seconds=grace,
            grpc_port=grpc_port,
            metrics_port=metrics_port,
        ),
        storage=StorageConfig(storage_class=storage_class, size=size, uri=uri, retention=retention),
        training=TrainingConfig(
            dataset=dataset,
            epochs=epochs,
            batch_size=batch_size,
            steps_per_epoch=steps_per_epoch,
            checkpoint_every=checkpoint_every,
            collective=collective,
            collective_timeout_seconds=collective_timeout,
            heartbeat_timeout_seconds=heartbeat_timeout,
            run_id=run_id,
            on_done=on_done,
            precision=precision,
        ),
        autoscaling=AutoscalingConfig(
            enabled=hpa_on,
            min_replicas=hpa_min,
            max_replicas=hpa_max,
            cpu_limit_utilization=cpu_target,
            scale_up_window_seconds=window,
            cpu_request_millis=_millis(cpu_req_v),
            cpu_limit_millis=_millis(cpu_lim_v),
        ),
        monitoring=MonitoringConfig(
            enabled=mon_on,
            namespace=mon_ns,
            chart_version=chart_version,
            install=mon_install,
            grafana_admin_password=secret_values["grafanaAdminPassword"],
            chart_repository=chart_repository,
            values=chart_values,
            alert_for_minutes=alert_for,
            namespace_mode=mon_ns_mode,
        ),
        project=project,
        stack=stack,
        image=image,
    )


# --- Project declarations (Pulumi.yaml) and the Pulumi runtime. ---


@dataclass(frozen=True)
class Declaration:
    """One ``config:`` entry of ``Pulumi.yaml``."""

    key: str
    type: str
    default: Any
    description: str
    items_type: str | None = None


def project_declarations(path: Path = PROJECT_FILE) -> dict[str, Declaration]:
    """The project-namespace config declarations of ``Pulumi.yaml``, by short key."""
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    out: dict[str, Declaration] = {}
    for key, spec in (doc.get("config") or {}).items():
        if ":" in key and not key.startswith(f"{PROJECT}:"):
            continue
        short = key.split(":", 1)[-1]
        out[short] = Declaration(
            key=short,
            type=spec["type"],
            default=spec.get("default"),
            description=spec.get("description", ""),
            items_type=(spec.get("items") or {}).get("type"),
        )
    return out


def to_config_text(value: Any) -> str:
    """A typed YAML value as the Pulumi CLI hands it to the program (arrays as JSON)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | dict):
        return json.dumps(value)
    return str(value)


def _runtime_config() -> tuple[dict[str, Any], set[str]]:
    """Every config key the engine gave this program, and which of them are secret.

    The program's one private Pulumi SDK use (the renderer's are in ``tools/pulumi_private.py``):
    ``pulumi.runtime.config.CONFIG``, the whole config mapping. The unknown-key check needs every
    key, and ``pulumi.Config`` reads only keys it is given by name; the public
    ``pulumi.runtime.get_config_env`` lists ``PULUMI_CONFIG``, which the CLI's language host
    sets, but Automation API inline programs (the e2e suite) and mocks (the renderer) receive
    their config through ``set_all_config`` only, which nothing public lists.
    """
    from pulumi.runtime.config import CONFIG  # private; see above

    values: dict[str, Any] = dict(pulumi.runtime.get_config_env())
    values.update(CONFIG.get())
    secret = set(pulumi.runtime.get_config_secret_keys_env())
    secret.update(k for k in values if pulumi.runtime.is_config_secret(k))
    return values, secret


def load_config(
    reader: Callable[[], tuple[dict[str, Any], set[str]]] = _runtime_config,
) -> StackConfig:
    """Read and validate this stack's configuration from the Pulumi runtime.

    Raises:
        ConfigError: see :func:`parse_config`.
    """
    raw, secret_keys = reader()
    cfg = pulumi.Config(PROJECT)
    secrets = {
        key: cfg.get_secret(key)
        for key in SECRET_KEYS
        if raw.get(f"{PROJECT}:{key}") not in ("", None)
    }
    return parse_config(raw, secret_keys, {k: v for k, v in secrets.items() if v is not None})


def contract_defaults() -> dict[str, int | str]:
    """Config keys whose ``Pulumi.yaml`` default must equal the pod contract's default."""
    return {
        "grpcPort": contract.DEFAULT_GRPC_PORT,
        "metricsPort": contract.DEFAULT_METRICS_PORT,
        "clusterDomain": contract.DEFAULT_CLUSTER_DOMAIN,
    }
