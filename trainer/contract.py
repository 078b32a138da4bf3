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
from typing import Any, NamedTuple

from trainer.errors import EXIT_NOT_ADMITTED, EXIT_PEER_LOST, EXIT_RESTART, ContractError

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
"""The run's checkpoint directory, ``<root>/<run id>``: a path on the shared volume, or a
``gs://``/``s3://`` URI (the stacks use ``<root>/<project>/<stack>/<run id>``). One directory
per run: a new run id is a new directory, so a new run trains from step 0 and a finished run
stays finished (see :data:`ENV_RUN_ID`)."""
ENV_RUN_ID = "TFD_RUN_ID"
"""Identity of the training run (:data:`RUN_ID`): must equal the last path segment of
``TFD_CHECKPOINT_DIR``; when unset it is taken from there. Logged in ``start``, written to
``summary.json`` and ``DONE``, and the ``run_id`` label of ``tfd_run_info``."""
ENV_PROJECT = "TFD_PROJECT"
"""The Pulumi project that deployed the pod (``pulumi.get_project()``); recorded in the run
manifest. Unset (local runs): empty."""
ENV_STACK = "TFD_STACK"
"""The Pulumi stack that deployed the pod (``pulumi.get_stack()``); recorded in the run
manifest. Unset (local runs): empty."""
ENV_APP = "TFD_APP"
"""The stack's ``appName``; recorded in the run manifest. Unset (local runs): empty."""
ENV_IMAGE = "TFD_IMAGE"
"""The container image reference the StatefulSet runs; recorded in the run manifest for
information (a new image is a rollout of the same run). Unset: empty."""
ENV_POD_REVISION = "TFD_POD_REVISION"
"""The pod's ``controller-revision-hash`` label (downward API
``metadata.labels['controller-revision-hash']``). With API access the trainer compares it with
the StatefulSet's ``status.updateRevision``: a non-empty update revision that differs means a
rollout (``trainer.watch.decide``). Unset: rollouts are not detected."""
ENV_METRICS_PORT = "TFD_METRICS_PORT"
"""TCP port of the HTTP server with ``/metrics``, ``/healthz`` and ``/readyz``."""
ENV_API_TOKEN_PATH = "TFD_API_TOKEN_PATH"
"""Projected service-account token file, read when API access is configured
(:func:`api_configured`)."""
ENV_API_CA_PATH = "TFD_API_CA_PATH"
"""CA bundle of the API server (``https://`` URLs), read when API access is configured."""
ENV_API_URL = "TFD_API_URL"
"""Base URL of the Kubernetes API. Setting it (non-empty) is what configures API access
(:func:`api_configured`); ``TFD_REPLICAS_SOURCE=api`` alone also does, at
:data:`DEFAULT_API_URL`. With API access the trainer watches its StatefulSet (world size,
rollouts) and may scale it to zero and delete its own pod (:data:`API_CALLS`)."""
ENV_SUPERVISOR_RESTARTS = "TFD_SUPERVISOR_RESTARTS"
"""Set by the supervisor (:data:`ENTRYPOINT`) for the trainer it starts: planned restarts so far
in this container; exported as ``tfd_supervisor_restarts_total``. Never set by the manifest."""
ENV_METRICS_FD = "TFD_METRICS_FD"
"""Set by the supervisor for the trainer it starts: the descriptor of the listening socket on
``TFD_METRICS_PORT``, which the supervisor holds for the container's life, so a probe during a
planned restart waits for the next trainer instead of being refused. Never set by the
manifest."""
ENV_START_DELAY_SECONDS = "TFD_START_DELAY_SECONDS"
"""Set by the supervisor for the child it starts after exit 77: seconds to wait, serving the
probes, before reading the StatefulSet and forming the cluster. Never set by the manifest."""
ENV_SUPERVISOR_MAX_RESTARTS = "TFD_SUPERVISOR_MAX_RESTARTS"
"""Optional: planned restarts allowed within ``TFD_SUPERVISOR_WINDOW_SECONDS`` before the
supervisor gives up (default :data:`SUPERVISOR_MAX_RESTARTS`)."""
ENV_SUPERVISOR_WINDOW_SECONDS = "TFD_SUPERVISOR_WINDOW_SECONDS"
"""Optional: the hot-loop window in seconds (default :data:`SUPERVISOR_WINDOW_SECONDS`)."""
ENV_SUPERVISOR_PAUSE_SECONDS = "TFD_SUPERVISOR_PAUSE_SECONDS"
"""Optional: fixed pause before each planned restart (default :data:`SUPERVISOR_PAUSE_SECONDS`)."""
ENV_WORKER_HOSTS = "TFD_WORKER_HOSTS"
"""Local runs only (never set in a cluster): comma-separated ``host:port`` per worker that
replace the DNS-derived addresses, so N processes on one machine can use loopback ports."""
ENV_LAUNCH_ID = "TFD_LAUNCH_ID"
"""Local runs only (never set in a cluster): a token ``trainer.local`` draws once per launch and
gives every worker of it (the same across its restarts). The chief adds it to its lease's holder
(``trainer.lease.holder_identity``), so two launches of one run id on one host, which have the
same pod names, are two holders; in a cluster the StatefulSet's ``metadata.uid`` plays this
part. Unset: the holder is the pod name and host alone."""
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
"""File the chief writes into the checkpoint directory once the final model is saved (JSON:
``run_id``, ``final_step``, ``epochs``, ``steps_per_epoch``, ``global_batch``)."""
REPLICAS_SOURCES = ("env", "api")

RUN_ID = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
"""A run id: 1-63 letters, digits, ``-``, ``_``, ``.``, starting and ending with a letter or
digit (a Kubernetes label value, a path segment, a Prometheus label value)."""
RUN_ID_RULE = "1-63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit"

ENTRYPOINT: tuple[str, ...] = ("python", "-m", "trainer.supervisor")
"""The trainer image's entrypoint: the supervisor, which runs ``python -m trainer <args>`` as
its child and restarts it at once, inside the container, when it exits with one of
:data:`SUPERVISOR_RESTART_CODES` (no kubelet back-off). The Dockerfile's ENTRYPOINT must equal
this (a test parses it); the StatefulSet sets only ``args`` (the trainer's flags)."""
TRAINER_MODULE = "trainer"
"""The supervisor's child: ``python -m trainer <args>``."""
SUPERVISOR_RESTART_CODES: tuple[int, ...] = (EXIT_PEER_LOST, EXIT_RESTART, EXIT_NOT_ADMITTED)
"""Exit codes of a planned restart (75: a peer died; 76: preempted, world size changed or
rollout; 77: not admitted yet): the supervisor starts the trainer again. Any other code ends the
container with it."""
SUPERVISOR_WAIT_CODES: tuple[int, ...] = (EXIT_NOT_ADMITTED,)
"""Restarts that wait for the others: the next child waits (``TFD_START_DELAY_SECONDS``, its
probes answered) a time that doubles from :data:`SUPERVISOR_PAUSE_SECONDS` up to
:data:`SUPERVISOR_MAX_WAIT_SECONDS` while they repeat, and the hot-loop guard does not count
them (a joining worker may wait minutes for a large model's next checkpoint), up to
:data:`SUPERVISOR_MAX_WAITING_SECONDS` in a row."""
SUPERVISOR_MAX_WAIT_SECONDS = 10.0
SUPERVISOR_MAX_WAITING_SECONDS = 1800.0
"""Consecutive exit-77 restarts for longer than this (the others never stopped for the new
size): the supervisor exits 77 so that the kubelet's back-off shows it."""
SUPERVISOR_MAX_RESTARTS = 10
"""More planned restarts than this within :data:`SUPERVISOR_WINDOW_SECONDS` is a hot loop: the
supervisor exits with the trainer's code (the kubelet's back-off takes over)."""
SUPERVISOR_WINDOW_SECONDS = 300.0
SUPERVISOR_PAUSE_SECONDS = 1.0

ON_DONE_SCALE_TO_ZERO = "scale-to-zero"
ON_DONE_IDLE = "idle"
ON_DONE_EXIT = "exit"
ON_DONE_MODES: tuple[str, ...] = (ON_DONE_SCALE_TO_ZERO, ON_DONE_IDLE, ON_DONE_EXIT)
"""Values of the trainer's ``--on-done`` flag: what a worker does once the run is finished.
``scale-to-zero`` (needs API access): the chief PATCHes the StatefulSet's ``scale`` to 0
replicas, every worker waits for SIGTERM; ``idle``: serve the final metrics until terminated;
``exit``: exit 0."""


class ApiCall(NamedTuple):
    """One kind of Kubernetes API request the trainer makes (an RBAC rule's parts)."""

    api_group: str
    """``""`` is the core group."""
    resource: str
    verb: str


API_CALLS: tuple[ApiCall, ...] = (
    ApiCall("apps", "statefulsets", "get"),
    ApiCall("apps", "statefulsets/scale", "patch"),
    ApiCall("", "pods", "delete"),
)
"""Every API request the trainer's adapter (``trainer/k8s.py``) can make, and nothing else (a
test checks it). The Role grants exactly these, on the names :func:`api_resource_names` gives:

- ``get statefulsets`` (its own StatefulSet): live ``spec.replicas``, ``status.updateRevision``
  and ``metadata.uid`` (the token of the chief's lease holder);
- ``patch statefulsets/scale`` (its own StatefulSet): ``--on-done scale-to-zero``;
- ``delete pods`` (``<statefulset>-0`` .. ``<statefulset>-<max-1>``): a worker deletes its own
  pod after a rollout stop, so the controller recreates it from the new template.
"""


def api_resource_names(call: ApiCall, statefulset: str, max_replicas: int) -> list[str]:
    """The ``resourceNames`` of the Role rule for ``call``: the StatefulSet, or its pods."""
    if call.resource == "pods":
        return [f"{statefulset}-{i}" for i in range(max_replicas)]
    return [statefulset]


def role_rules(statefulset: str, max_replicas: int) -> list[dict[str, Any]]:
    """The Role's ``rules`` for :data:`API_CALLS` (one rule per call, least privilege)."""
    return [
        {
            "apiGroups": [call.api_group],
            "resources": [call.resource],
            "resourceNames": api_resource_names(call, statefulset, max_replicas),
            "verbs": [call.verb],
        }
        for call in API_CALLS
    ]


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


def metrics_fd(env: Mapping[str, str]) -> int | None:
    """The supervisor's listening socket (``TFD_METRICS_FD``), or ``None`` to bind the port."""
    if not env.get(ENV_METRICS_FD, "").strip():
        return None
    return _int_in_range(env, ENV_METRICS_FD, None, 0, 2**31 - 1)


def start_delay_seconds(env: Mapping[str, str]) -> float:
    """``TFD_START_DELAY_SECONDS`` (0 when unset): the supervisor's wait before this child forms
    the cluster again."""
    raw = env.get(ENV_START_DELAY_SECONDS, "").strip()
    try:
        value = float(raw) if raw else 0.0
    except ValueError:
        value = -1.0
    if not 0 <= value <= SUPERVISOR_MAX_WAIT_SECONDS:
        raise ContractError(
            f"{ENV_START_DELAY_SECONDS}: must be a number of seconds in "
            f"[0, {SUPERVISOR_MAX_WAIT_SECONDS:g}]; got {raw!r}"
        )
    return value


def api_configured(env: Mapping[str, str]) -> bool:
    """Whether the pod can call the Kubernetes API: ``TFD_API_URL`` is non-empty, or
    ``TFD_REPLICAS_SOURCE=api`` (which reads the StatefulSet, at :data:`DEFAULT_API_URL` unless
    ``TFD_API_URL`` says otherwise). An explicit ``TF_CONFIG`` never disables it."""
    return bool(env.get(ENV_API_URL, "").strip()) or replicas_source(env) == "api"


def run_id_of(checkpoint_dir: str) -> str:
    """The run id of a checkpoint directory: its last path segment (``<root>/<run id>``)."""
    return checkpoint_dir.rstrip("/").rsplit("/", 1)[-1]


def run_id_from_env(env: Mapping[str, str]) -> str:
    """The run id: ``TFD_RUN_ID``, which must be the last segment of ``TFD_CHECKPOINT_DIR``;
    when unset, that last segment itself (not validated: it only labels logs and metrics).

    Raises:
        ContractError: ``TFD_RUN_ID`` does not match :data:`RUN_ID` or is not the checkpoint
            directory's last segment.
    """
    directory = env.get(ENV_CHECKPOINT_DIR, "").strip().rstrip("/")
    last = run_id_of(directory)
    explicit = env.get(ENV_RUN_ID, "").strip()
    if not explicit:
        return last
    if not RUN_ID.match(explicit):
        raise ContractError(f"{ENV_RUN_ID}: must be {RUN_ID_RULE}; got {explicit!r}")
    if last != explicit:
        raise ContractError(
            f"{ENV_CHECKPOINT_DIR}: must be '<root>/{explicit}' (one directory per "
            f"{ENV_RUN_ID}); got {directory!r}"
        )
    return explicit


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
METRIC_RUN_INFO = "tfd_run_info"
"""Always 1, with labels ``run_id`` (:data:`ENV_RUN_ID`) and ``revision``
(:data:`ENV_POD_REVISION`, empty when unset)."""
METRIC_SUPERVISOR_RESTARTS = "tfd_supervisor_restarts_total"
"""Planned restarts of the trainer by the supervisor in this container (counter, from
:data:`ENV_SUPERVISOR_RESTARTS`; 0 when the trainer runs without the supervisor)."""
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
    METRIC_RUN_INFO,
    METRIC_SUPERVISOR_RESTARTS,
)
HISTOGRAMS: tuple[str, ...] = (METRIC_STEP_SECONDS, METRIC_CHECKPOINT_SAVE_SECONDS)
"""Exposed as ``<name>_bucket``, ``<name>_sum`` and ``<name>_count`` series."""
