"""The pod environment contract between the worker StatefulSet and the trainer.

This module is the single definition of what the StatefulSet puts into each worker pod (variable
names, ports, paths, the entrypoint) and of the pure function from that environment to
``TF_CONFIG``. The Pulumi program imports it to build the pod spec; the trainer and the local
launcher import it to read the same environment. It imports no TensorFlow.

Worker addresses follow StatefulSet + headless Service DNS::

    <statefulset>-<i>.<service>.<namespace>.svc.<cluster-domain>:<grpc-port>

and the task index is the ordinal at the end of the pod name (``tfd-worker-3`` -> 3).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trainer.errors import ContractError

# --- Environment variable names (set by the StatefulSet; the local launcher sets the same). ---
ENV_POD_NAME = "TFD_POD_NAME"
"""Pod name, from the downward API (``metadata.name``); its ordinal is the task index."""
ENV_NAMESPACE = "TFD_NAMESPACE"
"""Pod namespace, from the downward API (``metadata.namespace``)."""
ENV_STATEFULSET = "TFD_STATEFULSET"
"""Name of the worker StatefulSet; pod names are ``<statefulset>-<ordinal>``."""
ENV_SERVICE = "TFD_SERVICE"
"""Name of the headless Service that gives each worker a stable DNS name."""
ENV_REPLICAS = "TFD_REPLICAS"
"""Number of workers (the StatefulSet's replicas when the pod template was written)."""
ENV_REPLICAS_SOURCE = "TFD_REPLICAS_SOURCE"
"""``env`` (default): trust ``TFD_REPLICAS``. ``api``: read the StatefulSet's live
``spec.replicas`` from the Kubernetes API (set when an autoscaler may change it)."""
ENV_GRPC_PORT = "TFD_GRPC_PORT"
"""TCP port of the TensorFlow collective/gRPC server in every worker."""
ENV_CLUSTER_DOMAIN = "TFD_CLUSTER_DOMAIN"
"""Cluster DNS domain (default ``cluster.local``)."""
ENV_CHECKPOINT_DIR = "TFD_CHECKPOINT_DIR"
"""Shared checkpoint location: a path on the shared volume, or a ``gs://``/``s3://`` URI."""
ENV_METRICS_PORT = "TFD_METRICS_PORT"
"""TCP port of the HTTP server with ``/metrics``, ``/healthz`` and ``/readyz``."""
ENV_API_TOKEN_PATH = "TFD_API_TOKEN_PATH"
"""Projected service-account token file, read only when ``TFD_REPLICAS_SOURCE=api``."""
ENV_API_CA_PATH = "TFD_API_CA_PATH"
"""CA bundle of the API server, read only when ``TFD_REPLICAS_SOURCE=api``."""
ENV_API_URL = "TFD_API_URL"
"""Base URL of the Kubernetes API (default ``https://kubernetes.default.svc``)."""
ENV_WORKER_HOSTS = "TFD_WORKER_HOSTS"
"""Local runs only (never set in a cluster): comma-separated ``host:port`` per worker that
replace the DNS-derived addresses, so N processes on one machine can use loopback ports."""
ENV_RUN_ID = "TFD_RUN_ID"
"""Identity of the training run (logged and in ``summary.json``); its checkpoints and ``DONE``
live under ``TFD_CHECKPOINT_DIR``, which the stack makes per run."""
ENV_POD_REVISION = "TFD_POD_REVISION"
"""The pod's ``controller-revision-hash`` label, from the downward API: a StatefulSet
``status.updateRevision`` that differs means a rollout is waiting for this pod."""
ENV_TF_CONFIG = "TF_CONFIG"
"""An explicit ``TF_CONFIG`` always wins over the derived one."""

# --- Defaults and fixed values. ---
DEFAULT_GRPC_PORT = 2222
DEFAULT_METRICS_PORT = 8080
DEFAULT_CLUSTER_DOMAIN = "cluster.local"
DEFAULT_API_URL = "https://kubernetes.default.svc"
DEFAULT_API_TOKEN_PATH = "/var/run/secrets/tfd/token"
DEFAULT_API_CA_PATH = "/var/run/secrets/tfd/ca.crt"
GRPC_PORT_NAME = "grpc"
METRICS_PORT_NAME = "metrics"
METRICS_PATH = "/metrics"
LIVENESS_PATH = "/healthz"
READINESS_PATH = "/readyz"
DONE_MARKER = "DONE"
"""File the chief writes into the checkpoint directory once the final model is saved."""
REPLICAS_SOURCES = ("env", "api")

API_CALLS: tuple[tuple[str, str, str], ...] = (
    ("apps", "statefulsets", "get"),
    ("apps", "statefulsets/scale", "patch"),
    ("", "pods", "delete"),
)
"""Every Kubernetes API call the trainer makes, as (API group, resource, verb): read its
StatefulSet, scale it to zero when the run is done, delete its own pod for a rollout. The
stack's Role grants exactly these, on the StatefulSet's and its pods' names only."""

ENTRYPOINT: tuple[str, ...] = ("python", "-m", "trainer")
"""The trainer image's entrypoint. The Dockerfile's ENTRYPOINT must equal this (a test parses
it); the StatefulSet sets only ``args`` so the image stays the one definition."""

COLLECTIVES: tuple[str, ...] = ("auto", "ring", "nccl")
"""Values of the trainer's ``--collective`` flag (the stack config's ``collective`` key)."""

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
"""RFC 1123 label: names of StatefulSets, Services and namespaces."""
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
"""RFC 1123 subdomain: cluster domains, StorageClass names."""


@dataclass(frozen=True)
class ClusterSpec:
    """Where this worker sits in the job: its index and every worker's ``host:port``."""

    task_index: int
    workers: tuple[str, ...]

    @property
    def num_workers(self) -> int:
        return len(self.workers)

    @property
    def is_chief(self) -> bool:
        """Worker 0 is the chief under MultiWorkerMirroredStrategy."""
        return self.task_index == 0

    def tf_config(self) -> dict[str, Any]:
        """The ``TF_CONFIG`` dictionary MultiWorkerMirroredStrategy reads."""
        return {
            "cluster": {"worker": list(self.workers)},
            "task": {"type": "worker", "index": self.task_index},
        }

    def tf_config_json(self) -> str:
        return json.dumps(self.tf_config(), separators=(",", ":"))


def worker_host(
    statefulset: str, ordinal: int, service: str, namespace: str, cluster_domain: str
) -> str:
    """Stable DNS name of StatefulSet pod ``ordinal`` behind a headless Service."""
    return f"{statefulset}-{ordinal}.{service}.{namespace}.svc.{cluster_domain}"


def worker_addresses(
    statefulset: str,
    replicas: int,
    service: str,
    namespace: str,
    cluster_domain: str = DEFAULT_CLUSTER_DOMAIN,
    port: int = DEFAULT_GRPC_PORT,
) -> tuple[str, ...]:
    """``host:port`` of every worker, ordinal 0 first. Infra exports these as stack outputs."""
    return tuple(
        f"{worker_host(statefulset, i, service, namespace, cluster_domain)}:{port}"
        for i in range(replicas)
    )


def ordinal_from_pod_name(pod_name: str, statefulset: str) -> int:
    """Task index from a StatefulSet pod name: ``<statefulset>-<ordinal>``.

    Raises:
        ContractError: the name does not start with ``<statefulset>-`` or has no ordinal.
    """
    prefix = f"{statefulset}-"
    suffix = pod_name[len(prefix) :] if pod_name.startswith(prefix) else ""
    if not suffix.isdigit() or (len(suffix) > 1 and suffix.startswith("0")):
        raise ContractError(
            f"{ENV_POD_NAME}: must be '<{ENV_STATEFULSET}>-<ordinal>' = "
            f"'{statefulset}-<n>'; got {pod_name!r}"
        )
    return int(suffix)


def _require(env: Mapping[str, str], key: str) -> str:
    value = env.get(key, "").strip()
    if not value:
        raise ContractError(f"{key}: required and must be non-empty; got {env.get(key)!r}")
    return value


def _int_in_range(env: Mapping[str, str], key: str, default: int | None, lo: int, hi: int) -> int:
    raw = env.get(key)
    if raw is None or raw.strip() == "":
        if default is None:
            raise ContractError(f"{key}: required integer in [{lo}, {hi}]; got {raw!r}")
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise ContractError(f"{key}: must be an integer in [{lo}, {hi}]; got {raw!r}") from None
    if not lo <= value <= hi:
        raise ContractError(f"{key}: must be an integer in [{lo}, {hi}]; got {raw!r}")
    return value


def _dns_name(env: Mapping[str, str], key: str, pattern: re.Pattern[str], default: str = "") -> str:
    value = env.get(key, default).strip() or default
    if not value or not pattern.match(value) or len(value) > 253:
        raise ContractError(f"{key}: must be a lowercase RFC 1123 DNS name; got {value!r}")
    return value


def grpc_port(env: Mapping[str, str]) -> int:
    """The gRPC port from the environment (default 2222, range 1-65535)."""
    return _int_in_range(env, ENV_GRPC_PORT, DEFAULT_GRPC_PORT, 1, 65535)


def metrics_port(env: Mapping[str, str]) -> int:
    """The metrics/health port from the environment (default 8080, range 1-65535)."""
    return _int_in_range(env, ENV_METRICS_PORT, DEFAULT_METRICS_PORT, 1, 65535)


def replicas_source(env: Mapping[str, str]) -> str:
    """``env`` or ``api`` (default ``env``); see :data:`ENV_REPLICAS_SOURCE`."""
    value = env.get(ENV_REPLICAS_SOURCE, "env").strip() or "env"
    if value not in REPLICAS_SOURCES:
        raise ContractError(
            f"{ENV_REPLICAS_SOURCE}: must be one of {REPLICAS_SOURCES}; got {value!r}"
        )
    return value


def _parse_explicit_tf_config(raw: str) -> ClusterSpec:
    try:
        doc = json.loads(raw)
        workers = doc["cluster"]["worker"]
        task = doc["task"]
        index = task["index"]
    except (ValueError, KeyError, TypeError):
        raise ContractError(
            f"{ENV_TF_CONFIG}: must be JSON with cluster.worker (list) and task.index; got {raw!r}"
        ) from None
    if task.get("type", "worker") != "worker":
        raise ContractError(
            f"{ENV_TF_CONFIG}: task.type must be 'worker'; got {task.get('type')!r}"
        )
    if not isinstance(workers, list) or not workers or not all(isinstance(w, str) for w in workers):
        raise ContractError(
            f"{ENV_TF_CONFIG}: cluster.worker must be a non-empty list of 'host:port'; "
            f"got {workers!r}"
        )
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(workers):
        raise ContractError(
            f"{ENV_TF_CONFIG}: task.index must be an integer in [0, {len(workers) - 1}]; "
            f"got {index!r}"
        )
    return ClusterSpec(task_index=index, workers=tuple(workers))


def _parse_worker_hosts(raw: str, replicas: int) -> tuple[str, ...]:
    hosts = tuple(h.strip() for h in raw.split(",") if h.strip())
    if len(hosts) != replicas:
        raise ContractError(
            f"{ENV_WORKER_HOSTS}: must list exactly {ENV_REPLICAS}={replicas} 'host:port' "
            f"entries; got {raw!r}"
        )
    for host in hosts:
        name, _, port = host.rpartition(":")
        if not name or not port.isdigit() or not 1 <= int(port) <= 65535:
            raise ContractError(f"{ENV_WORKER_HOSTS}: entry must be 'host:port'; got {host!r}")
    return hosts


def cluster_spec_from_env(env: Mapping[str, str], replicas: int | None = None) -> ClusterSpec:
    """Derive this worker's :class:`ClusterSpec` from the pod environment.

    Args:
        env: the process environment (``os.environ`` in a pod).
        replicas: the live replica count when ``TFD_REPLICAS_SOURCE=api`` (read from the
            Kubernetes API by the caller); ``None`` reads ``TFD_REPLICAS``.

    An explicit ``TF_CONFIG`` wins over everything else. Pure: no I/O, no TensorFlow.

    Raises:
        ContractError: a variable is missing or inconsistent; the message names the variable,
            the rule and the value received.
    """
    explicit = env.get(ENV_TF_CONFIG, "").strip()
    if explicit:
        return _parse_explicit_tf_config(explicit)

    statefulset = _dns_name(env, ENV_STATEFULSET, DNS_LABEL)
    pod_name = _require(env, ENV_POD_NAME)
    ordinal = ordinal_from_pod_name(pod_name, statefulset)
    if replicas is None:
        replicas = _int_in_range(env, ENV_REPLICAS, None, 1, 10_000)
    elif replicas < 1:
        raise ContractError(f"{ENV_REPLICAS}: live replica count must be >= 1; got {replicas!r}")
    if ordinal >= replicas:
        raise ContractError(
            f"{ENV_POD_NAME}: ordinal must be < {ENV_REPLICAS}={replicas}; "
            f"got {pod_name!r} (ordinal {ordinal})"
        )
    port = grpc_port(env)

    override = env.get(ENV_WORKER_HOSTS, "").strip()
    if override:
        workers = _parse_worker_hosts(override, replicas)
    else:
        workers = worker_addresses(
            statefulset,
            replicas,
            _dns_name(env, ENV_SERVICE, DNS_LABEL),
            _dns_name(env, ENV_NAMESPACE, DNS_LABEL),
            _dns_name(env, ENV_CLUSTER_DOMAIN, DNS_SUBDOMAIN, DEFAULT_CLUSTER_DOMAIN),
            port,
        )
    return ClusterSpec(task_index=ordinal, workers=workers)


def tf_config_from_env(env: Mapping[str, str], replicas: int | None = None) -> dict[str, Any]:
    """``TF_CONFIG`` for this pod; see :func:`cluster_spec_from_env`."""
    return cluster_spec_from_env(env, replicas).tf_config()


# --- Prometheus metric names exported on METRICS_PATH (monitoring dashboards and alerts use
# the same constants), following Prometheus naming: counters end in _total, ratios in _ratio,
# durations in _seconds (histograms), labels-only metadata in _info; the rest are gauges. ---
METRIC_STEP = "tfd_train_step"
"""Global training step (gauge; survives restarts because it is restored from checkpoints)."""
METRIC_STEPS_TOTAL = "tfd_train_steps_total"
"""Steps run by this process (counter; resets when the process restarts)."""
METRIC_EXAMPLES_TOTAL = "tfd_train_examples_total"
"""Global examples trained by the steps of this process (counter; rate() = global ex/s)."""
METRIC_EXAMPLES_PER_SECOND = "tfd_train_examples_per_second"
"""Global examples per second over the last logging interval (gauge)."""
METRIC_STEP_SECONDS = "tfd_train_step_duration_seconds"
"""Histogram of the time per training step (each call's time over its steps)."""
METRIC_LOSS = "tfd_train_loss"
METRIC_ACCURACY = "tfd_train_accuracy_ratio"
"""Global training accuracy, 0-1, last call (gauge)."""
METRIC_EVAL_LOSS = "tfd_eval_loss"
"""Mean loss of the last evaluation pass (gauge; 0 before the first)."""
METRIC_EVAL_ACCURACY = "tfd_eval_accuracy_ratio"
"""Accuracy, 0-1, of the last evaluation pass (gauge; 0 before the first)."""
METRIC_EPOCH = "tfd_train_epoch"
METRIC_WORLD_SIZE = "tfd_world_size"
METRIC_TASK_INDEX = "tfd_task_index"
METRIC_INFO = "tfd_worker_info"
"""Always 1, with labels ``task_index`` and ``world_size`` (for joins and tables)."""
METRIC_CHECKPOINT_STEP = "tfd_checkpoint_last_step"
METRIC_CHECKPOINT_TIMESTAMP = "tfd_checkpoint_last_timestamp_seconds"
"""Unix time of the last checkpoint (gauge); age = time() - this."""
METRIC_CHECKPOINT_AGE = "tfd_checkpoint_age_seconds"
METRIC_CHECKPOINT_SAVE_SECONDS = "tfd_checkpoint_save_duration_seconds"
"""Histogram of the time one checkpoint save takes (every worker takes part in each)."""
METRIC_RESUMES_TOTAL = "tfd_resumes_total"
"""Times this process resumed from a checkpoint (counter)."""
METRIC_COMPLETED = "tfd_training_completed"
"""1 once the DONE marker exists, else 0 (gauge)."""
METRIC_NAMES: tuple[str, ...] = (
    METRIC_STEP,
    METRIC_STEPS_TOTAL,
    METRIC_EXAMPLES_TOTAL,
    METRIC_EXAMPLES_PER_SECOND,
    METRIC_STEP_SECONDS,
    METRIC_LOSS,
    METRIC_ACCURACY,
    METRIC_EVAL_LOSS,
    METRIC_EVAL_ACCURACY,
    METRIC_EPOCH,
    METRIC_WORLD_SIZE,
    METRIC_TASK_INDEX,
    METRIC_INFO,
    METRIC_CHECKPOINT_STEP,
    METRIC_CHECKPOINT_TIMESTAMP,
    METRIC_CHECKPOINT_AGE,
    METRIC_CHECKPOINT_SAVE_SECONDS,
    METRIC_RESUMES_TOTAL,
    METRIC_COMPLETED,
)
HISTOGRAMS: tuple[str, ...] = (METRIC_STEP_SECONDS, METRIC_CHECKPOINT_SAVE_SECONDS)
"""Exposed as ``<name>_bucket``, ``<name>_sum`` and ``<name>_count`` series."""
