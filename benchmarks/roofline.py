"""Roofline figures: the model's FLOPs per example and this machine's matmul peaks.

Two independent FLOP counts of a model's forward pass: TensorFlow's profiler on the frozen
forward graph (what the kernels are asked to do) and an analytic count from the layer shapes
(what the architecture implies). A training step costs about three forward passes (forward, plus
backward through activations and weights), the usual approximation for dense and conv layers.
"""

from __future__ import annotations

import math
import time
from typing import Any

TRAIN_TO_FORWARD = 3
"""Training FLOPs per example / forward FLOPs per example (forward + 2x for the backward pass)."""


class BenchmarkError(RuntimeError):
    """A benchmark cannot produce a figure (unsupported model, failed subprocess, bad output)."""


def _dims(shape: Any) -> tuple[int, ...]:
    """A Keras shape without its batch axis, as ints."""
    dims = tuple(shape)[1:]
    if any(d is None for d in dims):
        raise BenchmarkError(f"shape {tuple(shape)}: every non-batch dimension must be known")
    return tuple(int(d) for d in dims)


def analytic_forward_flops(model: Any) -> int:
    """Forward FLOPs of one example, counted from layer shapes (tf-keras ``Sequential``-like).

    Counts the ops TensorFlow's profiler counts: a multiply-add as 2 FLOPs (Conv2D, Dense), one
    per output element for a bias add, one per window element per output for max pooling.
    Activations, reshapes and input layers count 0 (the profiler has no cost for ReLU either).

    Raises:
        BenchmarkError: a layer type with weights or pooling that this counter does not know.
    """
    import tf_keras

    layers = tf_keras.layers
    free = (layers.InputLayer, layers.Flatten, layers.Reshape, layers.Dropout, layers.Activation)
    total = 0
    for layer in model.layers:
        out = _dims(layer.output_shape)
        if isinstance(layer, layers.Conv2D) and not isinstance(layer, layers.Conv2DTranspose):
            kh, kw = layer.kernel_size
            c_in = _dims(layer.input_shape)[-1] // layer.groups
            total += 2 * kh * kw * c_in * math.prod(out)
            total += math.prod(out) if layer.use_bias else 0
        elif isinstance(layer, layers.Dense):
            total += 2 * _dims(layer.input_shape)[-1] * math.prod(out)
            total += math.prod(out) if layer.use_bias else 0
        elif isinstance(layer, layers.MaxPooling2D):
            ph, pw = layer.pool_size
            total += ph * pw * math.prod(out)
        elif not isinstance(layer, free):
            raise BenchmarkError(
                f"layer {layer.name!r} ({type(layer).__name__}): no analytic FLOP rule; "
                "supported: Conv2D, Dense, MaxPooling2D and weight-free reshapes"
            )
    return total


def profiled_forward_flops(model: Any, input_shape: tuple[int, ...]) -> int:
    """Forward FLOPs of one example from TensorFlow's profiler on the frozen inference graph.

    Args:
        model: a built tf-keras model.
        input_shape: one example's shape, without the batch axis (e.g. ``(28, 28, 1)``).
    """
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )
    from tensorflow.python.profiler import model_analyzer, option_builder

    forward = tf.function(lambda x: model(x, training=False))
    concrete = forward.get_concrete_function(tf.TensorSpec([1, *input_shape], tf.float32))
    frozen = convert_variables_to_constants_v2(concrete)
    builder = option_builder.ProfileOptionBuilder
    options = builder(builder.float_operation()).with_empty_output().build()
    profile = model_analyzer.profile(frozen.graph, options=options)
    if profile.total_float_ops <= 0:
        raise BenchmarkError(f"model {model.name!r}: the profiler counted no float operations")
    return int(profile.total_float_ops)


def matmul_peak_gflops(
    n: int = 2048, chain: int = 4, repeats: int = 7, dtype: str = "float32"
) -> float:
    """Best matmul throughput of this machine through TensorFlow, in GFLOP/s.

    Args:
        n: square matrix size (default 2048: large enough to be compute-bound on a CPU).
        chain: dependent ``n x n`` matmuls per ``tf.function`` call (default 4), so the Python
            call overhead is amortised.
        repeats: timed calls after one warm-up call (default 7); the fastest one counts, the
            usual estimate of a peak on a shared machine.
        dtype: ``float32`` or ``bfloat16`` (the compute type of ``--precision bf16``).
    """
    import tensorflow as tf

    if n < 1 or chain < 1 or repeats < 1:
        raise BenchmarkError(
            f"matmul_peak_gflops: n, chain, repeats must be >= 1; got {n}, {chain}, {repeats}"
        )
    # 1/sqrt(n) keeps the chained products' magnitude stable (no inf/denormal slow paths).
    a = tf.cast(tf.random.stateless_normal([n, n], seed=[1, 2], stddev=1.0 / math.sqrt(n)), dtype)
    b = tf.cast(tf.random.stateless_normal([n, n], seed=[3, 4]), dtype)

    @tf.function
    def chained(x: tf.Tensor) -> tf.Tensor:
        for _ in range(chain):
            x = tf.matmul(a, x)
        return tf.reduce_sum(tf.cast(x, tf.float32))

    chained(b).numpy()
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        chained(b).numpy()
        best = min(best, time.perf_counter() - t0)
    return 2.0 * n**3 * chain / best / 1e9
