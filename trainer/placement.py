"""Which ``tf.distribute`` strategy a worker uses, from the pod's shape.

=====================  ==============================================  =========================
Shape                  Strategy                                        Replicas
=====================  ==============================================  =========================
N pods (N >= 2)        MultiWorkerMirroredStrategy                     every local GPU of every
                                                                       pod (NCCL on GPUs with
                                                                       ``--collective auto``);
                                                                       one per pod on CPU
1 pod, M >= 2 GPUs     MirroredStrategy over all local GPUs            M
1 pod, M logical CPUs  MirroredStrategy over ``--cpu-devices`` CPUs    M
1 pod, one device      the default strategy (no collectives)           1
=====================  ==============================================  =========================

:func:`trainer.runtime.configure` must have run before (logical devices, coordination service).
"""

from __future__ import annotations

import os
from typing import Any

from trainer import contract, runtime
from trainer.config import Config
from trainer.errors import NotAdmittedError, PeerLostError
from trainer.logs import Log

NOT_ADMITTED = "Unexpected task registered"
"""What TensorFlow's coordination service answers a task that its running cluster does not have:
the chief still runs the cluster from before a scale-up (``NotAdmittedError``, exit 77)."""


def strategy(config: Config, spec: contract.ClusterSpec, log: Log) -> Any:
    """The strategy for this pod; forms the cluster when there are several workers.

    Raises:
        PeerLostError: the cluster cannot be formed.
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
        first = (getattr(err, "message", "") or str(err)).strip().splitlines()[:1]
        why = first[0] if first else type(err).__name__
        if NOT_ADMITTED in why:
            raise NotAdmittedError(
                f"the chief runs a cluster without task {spec.task_index} (the other workers "
                f"have not stopped for {spec.num_workers} workers yet): {why}"
            ) from None
        raise PeerLostError(f"cannot form the cluster {list(spec.workers)}: {why}") from None


def configure_heartbeat(spec: contract.ClusterSpec, timeout_s: float, log: Log) -> bool:
    """Configure the coordination service as the strategy would, plus our heartbeat timeout
    (a dead peer is then detected in seconds). Returns False, with one warning, when
    TensorFlow's private API for it is missing: the strategy then uses TF's defaults."""
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
        coordinated_jobs=[api.coordinated_job(name="worker", num_tasks=spec.num_workers)],
    )
    return True
