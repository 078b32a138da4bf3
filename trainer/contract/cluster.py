"""The cluster spec: from the pod environment to this worker's ``TF_CONFIG``.

Worker addresses follow StatefulSet + headless Service DNS::

    <statefulset>-<i>.<service>.<namespace>.svc.<cluster-domain>:<grpc-port>

and the task index is the ordinal at the end of the pod name (``tfd-worker-3`` -> 3). Pure: no
I/O, no TensorFlow.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trainer.contract.env import (
    DEFAULT_CLUSTER_DOMAIN,
    DEFAULT_GRPC_PORT,
    ENV_CLUSTER_DOMAIN,
    ENV_NAMESPACE,
    ENV_POD_NAME,
    ENV_REPLICAS,
    ENV_SERVICE,
    ENV_STATEFULSET,
    ENV_TF_CONFIG,
    ENV_WORKER_HOSTS,
    _dns_name,
    _int_in_range,
    _require,
    grpc_port,
)
from trainer.contract.rules import DNS_LABEL, DNS_SUBDOMAIN, REPLICAS
from trainer.errors import ContractError


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
    for host in workers:  # without a port TensorFlow would wait for the peer, not refuse it
        _check_host_port(f"{ENV_TF_CONFIG}: cluster.worker", host)
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
        _check_host_port(ENV_WORKER_HOSTS, host)
    return hosts


def _check_host_port(what: str, host: str) -> None:
    """A peer address must be ``host:port`` with a port in 1-65535."""
    name, _, port = host.rpartition(":")
    if not name or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ContractError(f"{what}: entry must be 'host:port'; got {host!r}")


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
        replicas = _int_in_range(env, ENV_REPLICAS, None, int(REPLICAS.lo), int(REPLICAS.hi))
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
