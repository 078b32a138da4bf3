"""The pod environment: what the worker StatefulSet puts into each pod, and how it is read.

The single definition of the variable names, ports, paths and the entrypoint. The Pulumi
program imports it to build the pod spec; the trainer and the local launcher import it to read
the same environment. :mod:`trainer.contract.cluster` derives ``TF_CONFIG`` from it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from trainer.contract.rules import GPUS_PER_WORKER, RUN_ID, RUN_ID_RULE
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
``gs://`` URI (``s3://`` is refused; the stacks use ``<root>/<project>/<stack>/<run id>``).
One directory per run: a new run id is a new directory, so a new run trains from step 0 and a
finished run stays finished (see :data:`ENV_RUN_ID`)."""
ENV_RUN_ID = "TFD_RUN_ID"
"""Identity of the training run (:data:`trainer.contract.rules.RUN_ID`): must equal the last
path segment of ``TFD_CHECKPOINT_DIR``; when unset it is taken from there. Logged in ``start``,
written to ``summary.json`` and ``DONE``, and the ``run_id`` label of ``tfd_run_info``."""
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
ENV_GPUS = "TFD_GPUS"
"""The GPUs Kubernetes gave the pod (its ``nvidia.com/gpu`` limit); unset on CPU pods and in
local runs. A worker that sees fewer in TensorFlow stops (``GpuMissingError``) unless
``--allow-cpu-fallback``: a GPU pod that trains on its CPU is a silent 10-100x slowdown."""
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
``run_id``, ``final_step``, ``epochs``, ``steps_per_epoch``, ``global_batch``, ``finished_utc``)."""
REPLICAS_SOURCES = ("env", "api")


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


def gpus_given(env: Mapping[str, str]) -> int:
    """The GPUs the pod was given (``TFD_GPUS``; 0 when unset)."""
    lo, hi = int(GPUS_PER_WORKER.lo), int(GPUS_PER_WORKER.hi)
    return _int_in_range(env, ENV_GPUS, 0, lo, hi)


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
