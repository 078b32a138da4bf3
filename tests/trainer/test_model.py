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
