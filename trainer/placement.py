"""Which ``tf.distribute`` strategy a worker uses, from the pod's shape (docs/trainer.md,
"Placement"): MultiWorkerMirroredStrategy for N >= 2 pods, MirroredStrategy over a pod's GPUs or
``--cpu-devices``, the default strategy for one device; and the wait for the peers before the
cluster forms. :func:`trainer.runtime.configure` must have run before.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any

from trainer import contract, runtime
from trainer.config import Config
from trainer.errors import GpuMissingError, NotAdmittedError, PeerLostError, RestartRequested
from trainer.logs import Log
from trainer.signals import StopSignal

NOT_ADMITTED = "Unexpected task registered"
"""What TensorFlow's coordination service answers a task that its running cluster does not have:
the chief still runs the cluster from before a scale-up (``NotAdmittedError``, exit 77)."""
FORM_TIMEOUT_S = 60.0
"""How long a worker waits for its peers before it forms the cluster, its probes answered and
SIGTERM honoured (:func:`await_peers`); then exit 75 and the supervisor starts it again."""
FORM_POLL_S = (0.05, 1.0)
"""The first and the longest pause between two looks for missing peers (:func:`await_peers`):
doubled each time. A restart's peers come within a second or so (the pause used to be a fixed
second, paid whole by every restart); a large cluster's forming backs off to one look a second."""
REGISTER_TIMEOUT_S = 15.0
"""TensorFlow's own bound (``cluster_register_timeout``) on a worker's registration with the
chief's coordination service. TensorFlow holds Python's GIL while it waits: no probe is answered
and no signal handled, so this stays below what the liveness probe tolerates (3 x 10 s)."""


def check_gpus(config: Config, given: int, seen: int, log: Log) -> None:
    """Stop when TensorFlow sees fewer GPUs than the pod was given (``TFD_GPUS``), unless
    ``--allow-cpu-fallback``; then it trains on what it sees, and says so (``cpu_fallback``).

    Raises:
        GpuMissingError: exit 3, naming what to check on the node and in the image.
    """
    if seen >= given:
        return
    if config.allow_cpu_fallback:
        log.event("cpu_fallback", gpus_given=given, gpus_seen=seen)
        return
    raise GpuMissingError(
        f"{contract.ENV_GPUS}={given}: the pod was given {given} GPU(s) but TensorFlow sees "
        f"{seen}: check the node's NVIDIA driver, the container runtime (the NVIDIA container "
        "toolkit, or runtimeClassName nvidia) and that the image is the GPU build "
        "(docs/image.md#gpu); --allow-cpu-fallback trains on what TensorFlow sees"
    )


def replicas_per_worker(config: Config, num_workers: int, gpus: int) -> int:
    """The replicas :func:`strategy` places on each worker with ``gpus`` local GPUs (the table
    above), without building it: ``--input-only`` iterates the same per-replica batches."""
    if num_workers == 1 and config.strategy != "multi-worker":
        if gpus > 1:
            return gpus
        if not gpus and config.cpu_devices > 1:
            return config.cpu_devices
        return 1
    return max(gpus, 1)  # MultiWorkerMirroredStrategy: every local GPU, or the CPU


def strategy(config: Config, spec: contract.ClusterSpec, log: Log, stop: StopSignal) -> Any:
    """The strategy for this pod; forms the cluster when there are several workers.

    Raises:
        PeerLostError: the cluster cannot be formed (a peer missing for
            :data:`FORM_TIMEOUT_S`, or TensorFlow's own error).
        NotAdmittedError: the chief runs a cluster without this worker.
        RestartRequested: SIGTERM while waiting for the peers.
    """
    import tensorflow as tf

    if spec.num_workers == 1 and config.strategy != "multi-worker":
        gpus = tf.config.list_logical_devices("GPU")
        if len(gpus) > 1:
            ops = tf.distribute.NcclAllReduce() if config.collective == "nccl" else None
            return tf.distribute.MirroredStrategy(cross_device_ops=ops)
        if not gpus and config.cpu_devices > 1:
            cpus = [d.name for d in tf.config.list_logical_devices("CPU")]
            return tf.distribute.MirroredStrategy(devices=cpus)
        # One worker, one device: MultiWorkerMirroredStrategy would still run a collective
        # all-reduce per step (measured 2-3x slower on CPU, docs/trainer.md).
        return tf.distribute.get_strategy()
    os.environ[contract.ENV_TF_CONFIG] = spec.tf_config_json()
    await_peers(spec, stop, log)
    configure_heartbeat(spec, config.heartbeat_timeout, log)
    impl = tf.distribute.experimental.CommunicationImplementation
    options = tf.distribute.experimental.CommunicationOptions(
        implementation={"auto": impl.AUTO, "ring": impl.RING, "nccl": impl.NCCL}[config.collective],
        # None: no per-collective timer thread (TensorFlow starts one per collective when a
        # timeout is set); dead peers are found by the coordination-service heartbeat.
        timeout_seconds=config.collective_timeout or None,
    )
    try:
        return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    except tf.errors.OpError as err:
        if stop.event.is_set():  # SIGTERM while TensorFlow held the interpreter: honour it now
            raise RestartRequested("stopped (SIGTERM) while the cluster was forming") from None
        first = (getattr(err, "message", "") or str(err)).strip().splitlines()[:1]
        why = first[0] if first else type(err).__name__
        if NOT_ADMITTED in why:
            raise NotAdmittedError(
                f"the chief runs a cluster without task {spec.task_index} (the other workers "
                f"have not stopped for {spec.num_workers} workers yet): {why}"
            ) from None
        raise PeerLostError(f"cannot form the cluster {list(spec.workers)}: {why}") from None


def await_peers(
    spec: contract.ClusterSpec, stop: StopSignal, log: Log, timeout_s: float = FORM_TIMEOUT_S
) -> None:
    """Wait, in Python, until the cluster can form: every peer's name resolves, and on the chief
    (the coordination service's leader) every other worker's gRPC port accepts connections
    (a worker opens it when it starts forming).

    TensorFlow's own wait happens inside the strategy's constructor, which holds Python's GIL:
    no signal handler and no probe runs there, and the chief's wait for the others has no
    bound. Done first, in Python, the wait answers the probes, honours SIGTERM within a second,
    and ends after ``timeout_s``; the constructor then finds every peer there.

    Raises:
        PeerLostError: a peer still missing after ``timeout_s`` (exit 75: restart and retry).
        RestartRequested: SIGTERM meanwhile (exit 76).
    """
    deadline = time.monotonic() + timeout_s
    why = dict.fromkeys((w for i, w in enumerate(spec.workers) if i != spec.task_index), "")
    logged: set[str] = set()
    pause, longest = FORM_POLL_S
    while True:
        for address in list(why):
            if stop.event.is_set():  # each peer may take a DNS answer or a 1 s connect
                break
            why[address] = _not_reachable(address, connect=spec.is_chief)
            if not why[address]:
                del why[address]
        if not why:
            return
        address, reason = next(iter(why.items()))
        if reason and address not in logged:
            logged.add(address)
            log.event("warning", message=f"cluster forming: waiting up to {timeout_s:g} s for "
                      f"{address}: {reason}")  # fmt: skip
        if stop.event.wait(pause):
            raise RestartRequested(
                f"stopped (SIGTERM) while the cluster was forming: {address} {reason}".rstrip()
            )
        pause = min(2 * pause, longest)
        if time.monotonic() > deadline:
            raise PeerLostError(
                f"cannot form the cluster within {timeout_s:g} s: {address} {reason}"
            )


def _not_reachable(address: str, connect: bool) -> str:
    """Why ``host:port`` cannot take part yet (``""``: it can): its name does not resolve, or,
    with ``connect``, nothing accepts connections there."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")  # an IPv6 literal
    try:
        socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as err:
        return f"does not resolve ({getattr(err, 'strerror', '') or err})"
    if connect:
        try:
            socket.create_connection((host, int(port)), timeout=1.0).close()
        except OSError as err:
            return f"does not accept connections ({err.strerror or err})"
    return ""


def configure_heartbeat(spec: contract.ClusterSpec, timeout_s: float, log: Log) -> bool:
    """Configure the coordination service as the strategy would, plus our heartbeat timeout
    (a dead peer is then detected in seconds) and :data:`REGISTER_TIMEOUT_S`. Returns False,
    with one warning, when TensorFlow's private API for it is missing: the strategy then uses
    TF's defaults."""
    import tensorflow as tf

    api, why = runtime.coordination_api()
    if api is None:
        log.event(
            "warning",
            message=f"--heartbeat-timeout not applied, TensorFlow's default heartbeat is used: "
            f"{why}",
        )
        return False
    cluster = tf.train.ClusterSpec(spec.tf_config()["cluster"])
    api.configure(
        service_type="standalone",
        service_leader=api.leader(cluster),
        heartbeat_timeout_in_ms=int(timeout_s * 1000),
        cluster_register_timeout_in_ms=int(REGISTER_TIMEOUT_S * 1000),
        coordinated_jobs=[api.coordinated_job(name="worker", num_tasks=spec.num_workers)],
    )
    return True
