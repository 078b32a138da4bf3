"""The model: the article's CNN by default, or a user's builder given as ``module:function``."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import Any

import tf_keras

from trainer.errors import ModelError


def default_cnn(input_shape: tuple[int, ...] = (28, 28, 1), num_classes: int = 10) -> Any:
    """The article's CNN: Conv2D(32, 3, relu) -> MaxPool -> Flatten -> Dense(128) -> logits."""
    return tf_keras.Sequential(
        [
            tf_keras.layers.InputLayer(input_shape=input_shape),
            tf_keras.layers.Conv2D(32, 3, activation="relu"),
            tf_keras.layers.MaxPooling2D(),
            tf_keras.layers.Flatten(),
            tf_keras.layers.Dense(128, activation="relu"),
            tf_keras.layers.Dense(num_classes),
        ],
        name="cnn",
    )


def load_builder(spec: str) -> Callable[..., Any]:
    """Import ``module:function``; an empty spec selects :func:`default_cnn`.

    Raises:
        ModelError: the module cannot be imported or has no such callable.
    """
    if not spec:
        return default_cnn
    module_name, _, func_name = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as err:  # noqa: BLE001 - any import-time failure of user code
        raise ModelError(f"--model {spec}: cannot import {module_name!r}: {err}") from None
    func = getattr(module, func_name, None)
    if not callable(func):
        raise ModelError(f"--model {spec}: {module_name!r} has no callable {func_name!r}")
    return func


def build(spec: str, input_shape: tuple[int, ...], num_classes: int) -> Any:
    """Call the builder (with ``input_shape``/``num_classes`` when it accepts them).

    Must be called under the strategy scope. The model must output ``num_classes`` logits.

    Raises:
        ModelError: the builder fails or does not return a tf-keras model with the right output.
    """
    builder = load_builder(spec)
    name = spec or "default CNN"
    try:
        params = inspect.signature(builder).parameters
        kwargs = {
            k: v
            for k, v in (("input_shape", input_shape), ("num_classes", num_classes))
            if k in params
        }
        model = builder(**kwargs)
    except Exception as err:  # noqa: BLE001 - user code may raise anything
        raise ModelError(f"--model {name}: builder raised {type(err).__name__}: {err}") from None
    if not isinstance(model, tf_keras.Model):
        raise ModelError(
            f"--model {name}: must return a tf_keras.Model (tf.keras with "
            f"TF_USE_LEGACY_KERAS=1); got {type(model).__name__}"
        )
    if not model.built:
        model.build((None, *input_shape))
    out = model.output_shape
    if not isinstance(out, tuple) or out[-1] != num_classes:
        raise ModelError(
            f"--model {name}: output shape must be (None, {num_classes}) logits; got {out}"
        )
    return model
