"""The default CNN and the ``--model module:function`` loader."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from trainer import model
from trainer.errors import EXIT_MODEL, ModelError

USER_MODULE = """
import tf_keras

def good(input_shape, num_classes):
    return tf_keras.Sequential(
        [tf_keras.layers.Flatten(input_shape=input_shape), tf_keras.layers.Dense(num_classes)]
    )

def no_args():
    return good((28, 28, 1), 10)

def wrong_width():
    return good((28, 28, 1), 3)

def wide():
    return good((28, 28, 1), 100)

def not_a_model():
    return "model"

def raises():
    raise RuntimeError("boom")
"""


@pytest.fixture(scope="module", autouse=True)
def user_module(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("user")
    (root / "user_models.py").write_text(USER_MODULE)
    sys.path.insert(0, str(root))
    yield
    sys.path.remove(str(root))


def test_default_cnn_is_the_articles():
    net = model.build("", (28, 28, 1), 10)
    kinds = [type(layer).__name__ for layer in net.layers]
    assert kinds == ["Conv2D", "MaxPooling2D", "Flatten", "Dense", "Dense"]
    assert net.output_shape == (None, 10)


@pytest.mark.parametrize("spec", ["user_models:good", "user_models:no_args"])
def test_user_builder(spec: str):
    assert model.build(spec, (28, 28, 1), 10).output_shape == (None, 10)


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("no_such_module_xyz:f", r"cannot import 'no_such_module_xyz'"),
        ("user_models:absent", r"has no callable 'absent'"),
        ("user_models:not_a_model", r"must return a tf_keras.Model.*got str"),
        ("user_models:raises", r"builder raised RuntimeError: boom"),
        ("user_models:wrong_width", r"must cover the labels 0-9 \(10 logits\); got 3"),
    ],
)
def test_builder_errors(spec: str, match: str, tmp_path: Path):
    with pytest.raises(ModelError, match=match) as info:
        model.build(spec, (28, 28, 1), 10)
    assert info.value.exit_code == EXIT_MODEL


@pytest.mark.parametrize(
    ("spec", "data_classes", "width"),
    [
        ("user_models:wide", 10, 100),  # no num_classes parameter: any width covering labels
        ("user_models:wide", 0, 100),  # classes unknown: the model's width decides
        ("user_models:good", 100, 100),  # the data's 100 classes reach the builder
    ],
)
def test_output_width(spec: str, data_classes: int, width: int):
    assert model.build(spec, (28, 28, 1), data_classes).output_shape == (None, width)


def test_unknown_classes_need_the_flag():
    with pytest.raises(ModelError, match=r"number of classes is unknown.*set --num-classes"):
        model.build("", (28, 28, 1), 0)


@pytest.mark.parametrize("precision", ["float32", "mixed_bfloat16"])
def test_input_scale_is_the_saved_models_first_layer(tmp_path: Path, precision: str):
    """Pixels (scale 1/255) get a Rescaling layer in front: the saved model on raw 0-255 rows
    computes what the trained one did on the scaled rows. Scale 1 adds nothing."""
    import numpy as np
    import tensorflow as tf
    import tf_keras

    net = model.build("", (8, 8, 1), 4)
    assert model.with_input_scale(net, 1.0, (8, 8, 1)) is net
    tf_keras.mixed_precision.set_global_policy(precision)
    try:
        scaled = model.with_input_scale(model.build("", (8, 8, 1), 4), 1 / 255, (8, 8, 1))
    finally:
        tf_keras.mixed_precision.set_global_policy("float32")
    first = scaled.layers[0]
    assert isinstance(first, tf_keras.layers.Rescaling) and first.dtype == "float32", first
    assert scaled.trainable_weights == scaled.layers[1].trainable_weights, "extra weights"
    raw = np.random.default_rng(0).integers(0, 256, (5, 8, 8, 1)).astype("float32")
    path = str(tmp_path / "model.keras")
    scaled.save(path)
    loaded = tf_keras.models.load_model(path)
    expected = scaled.layers[1](tf.constant(raw / 255)).numpy()
    np.testing.assert_allclose(loaded(tf.constant(raw)).numpy(), expected, rtol=1e-2, atol=1e-2)
