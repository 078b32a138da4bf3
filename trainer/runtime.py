"""TensorFlow process set-up that must happen before TensorFlow's runtime starts.

Threads, logical devices and the coordination service can only be configured before the first
op runs; anything that runs one earlier (loading TFRecords, a ``--model`` module doing work at
import) would make them fail. :func:`configure` is therefore the first thing a worker does with
TensorFlow, and the dataset and the model come after it.

The coordination service's heartbeat is set through TensorFlow's private
``context.configure_coordination_service`` and the ``coordination_config_pb2`` protobuf, whose
import path has moved between releases. :func:`coordination_api` feature-detects both; when
either is missing the trainer logs one warning and keeps TensorFlow's default heartbeat.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trainer.config import Config
from trainer.errors import UsageError

COORDINATION_PB2_MODULES = (
    "tensorflow.compiler.xla.tsl.protobuf.coordination_config_pb2",  # TF 2.16+
    "tsl.protobuf.coordination_config_pb2",
    "tensorflow.tsl.protobuf.coordination_config_pb2",
    "tensorflow.core.protobuf.coordination_config_pb2",  # TF <= 2.12
)
"""Where TensorFlow releases have kept the coordination-service protobuf, newest first."""


def configure(config: Config) -> None:
    """Threads, logical CPU devices, seeds and op determinism, before TensorFlow starts.

    Raises:
        UsageError: TensorFlow's runtime was already started (nothing can be changed then).
    """
    import tensorflow as tf
    import tf_keras

    try:
        if config.intra_op_threads:
            tf.config.threading.set_intra_op_parallelism_threads(config.intra_op_threads)
        if config.cpu_devices > 1:
            cpu = tf.config.list_physical_devices("CPU")[0]
            tf.config.set_logical_device_configuration(
                cpu, [tf.config.LogicalDeviceConfiguration()] * config.cpu_devices
            )
    except RuntimeError as err:
        raise UsageError(
            "--intra-op-threads/--cpu-devices: must be applied before TensorFlow starts, but "
            f"something ran TensorFlow ops earlier: {err}"
        ) from None
    # Python's random, NumPy and TensorFlow: tf-keras initializers draw their seeds from
    # Python's random module, so tf.random.set_seed alone does not fix the initial weights.
    tf_keras.utils.set_random_seed(config.seed)
    if config.deterministic:
        tf.config.experimental.enable_op_determinism()


@dataclass(frozen=True)
class CoordinationApi:
    """TensorFlow's private coordination-service calls, as found in the installed release."""

    configure: Callable[..., None]
    coordinated_job: type
    leader: Callable[[Any], str]


def coordination_api() -> tuple[CoordinationApi | None, str]:
    """The private calls that set the heartbeat timeout, or ``None`` and why they are missing."""
    try:
        from tensorflow.python.distribute import multi_worker_util
        from tensorflow.python.eager import context
    except ImportError as err:
        return None, f"cannot import TensorFlow's context or multi_worker_util: {err}"
    configure = getattr(context.context(), "configure_coordination_service", None)
    leader = getattr(multi_worker_util, "coordination_leader", None)
    if configure is None or leader is None:
        return None, "context.configure_coordination_service or coordination_leader is gone"
    params = inspect.signature(configure).parameters
    missing = {
        "service_type",
        "service_leader",
        "heartbeat_timeout_in_ms",
        "cluster_register_timeout_in_ms",
        "coordinated_jobs",
    }
    missing -= set(params)
    if missing:
        return None, f"configure_coordination_service lacks {sorted(missing)}"
    for name in COORDINATION_PB2_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        job = getattr(module, "CoordinatedJob", None)
        if job is not None:
            return CoordinationApi(configure, job, leader), ""
    return None, f"no CoordinatedJob protobuf in {', '.join(COORDINATION_PB2_MODULES)}"
