"""Roofline helpers: FLOP counts (analytic = profiler) and the matmul peak's argument checks."""

from __future__ import annotations

import pytest

from benchmarks.roofline import (
    BenchmarkError,
    analytic_forward_flops,
    matmul_peak_gflops,
    profiled_forward_flops,
)


@pytest.mark.parametrize(
    ("input_shape", "num_classes"),
    [((28, 28, 1), 10), ((32, 32, 3), 5)],
)
def test_analytic_flops_equal_profiler_for_default_cnn(input_shape, num_classes):
    from trainer import model

    net = model.build("", input_shape, num_classes)
    analytic = analytic_forward_flops(net)
    profiled = profiled_forward_flops(net, input_shape)
    assert analytic == profiled, (
        f"default CNN {input_shape}->{num_classes}: analytic {analytic} != profiler {profiled}"
    )


def test_analytic_flops_rejects_unknown_layer():
    import tf_keras

    net = tf_keras.Sequential(
        [
            tf_keras.layers.InputLayer(input_shape=(8,)),
            tf_keras.layers.BatchNormalization(name="bn"),
            tf_keras.layers.Dense(2),
        ]
    )
    with pytest.raises(BenchmarkError, match=r"'bn' \(BatchNormalization\): no analytic"):
        analytic_forward_flops(net)


@pytest.mark.parametrize(("n", "chain", "repeats"), [(0, 1, 1), (8, 0, 1), (8, 1, 0)])
def test_matmul_peak_rejects_non_positive_sizes(n, chain, repeats):
    with pytest.raises(BenchmarkError, match="must be >= 1"):
        matmul_peak_gflops(n, chain, repeats)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_matmul_peak_is_positive_for_both_types(dtype: str):
    assert matmul_peak_gflops(64, chain=1, repeats=1, dtype=dtype) > 0, dtype
