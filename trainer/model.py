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
            # float32 logits under a mixed-precision policy (softmax and the loss stay exact).
            tf_keras.layers.Dense(num_classes, dtype="float32"),
        ],
        name="cnn",
    )


def with_input_scale(net: Any, scale: float, input_shape: tuple[int, ...]) -> Any:
    """``net`` behind a ``Rescaling(scale)`` layer (the data's scale, ``trainer.data.Source``),
    so the saved model takes the user's raw rows; ``net`` itself when ``scale`` is 1.

    The layer computes in float32 whatever the precision policy (``net`` casts its input as
    before) and has no weights: checkpoints track ``net`` alone, so they do not depend on it.
    """
    if scale == 1.0:
        return net
    return tf_keras.Sequential(
        [
            tf_keras.layers.InputLayer(input_shape=input_shape),
            tf_keras.layers.Rescaling(scale, name="input_scale", dtype="float32"),
            net,
        ],
        name=f"{net.name}_scaled",
    )


def load_builder(spec: str) -> Callable[..., Any]:
    """Import ``module:function``; an empty spec selects :func:`default_cnn`.

    Raises:
        ModelError: the module cannot be imported or has no such callable.
    """
    if not spec:
        return default_cnn
    return _import(spec, "--model")


def sparse_cross_entropy(labels: Any, logits: Any) -> Any:
    """The default loss: sparse categorical cross-entropy from logits, one value per example."""
    import tensorflow as tf

    return tf.nn.sparse_softmax_cross_entropy_with_logits(tf.cast(labels, tf.int32), logits)


def load_loss(spec: str) -> Callable[[Any, Any], Any]:
    """``--loss module:function``: ``f(labels, logits)`` -> one loss per example; empty: the
    default cross-entropy. Checked on a two-example batch of 3 logits.

    Raises:
        ModelError: cannot import, not callable, raises, or returns another shape.
    """
    if not spec:
        return sparse_cross_entropy
    import tensorflow as tf

    func = _import(spec, "--loss")
    try:
        out = tf.convert_to_tensor(func(tf.constant([0, 2]), tf.zeros([2, 3])))
    except Exception as err:  # noqa: BLE001 - user code may raise anything
        raise ModelError(f"--loss {spec}: raised {type(err).__name__}: {err}") from None
    if out.shape != (2,):
        raise ModelError(
            f"--loss {spec}: must return one loss per example (shape [2] for 2 examples); "
            f"got shape {list(out.shape)}"
        )
    return func


def _import(spec: str, flag: str) -> Callable[..., Any]:
    module_name, _, func_name = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as err:  # noqa: BLE001 - any import-time failure of user code
        raise ModelError(f"{flag} {spec}: cannot import {module_name!r}: {err}") from None
    func = getattr(module, func_name, None)
    if not callable(func):
        raise ModelError(f"{flag} {spec}: {module_name!r} has no callable {func_name!r}")
    return func


def build(spec: str, input_shape: tuple[int, ...], num_classes: int) -> Any:
    """Call the builder (with ``input_shape``/``num_classes`` when it accepts them).

    Must be called under the strategy scope. ``num_classes`` comes from ``--num-classes`` or the
    data's labels; 0 means unknown (TFRecords not counted). A builder that takes
    ``num_classes`` must output exactly that many logits; one that does not may output any
    width that covers the labels (its width is then the number of classes).

    Raises:
        ModelError: the builder fails, does not return a tf-keras model, or its output does not
            fit the labels.
    """
    builder = load_builder(spec)
    name = spec or "default CNN"
    try:
        params = inspect.signature(builder).parameters
    except (TypeError, ValueError):  # builtins and some C callables have no signature
        params = {}
    wants_classes = "num_classes" in params
    if wants_classes and num_classes < 1:
        raise ModelError(
            f"--model {name}: the number of classes is unknown (TFRecords are not counted when "
            "--steps-per-epoch is given); set --num-classes"
        )
    try:
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
    width = out[-1] if isinstance(out, tuple) and len(out) == 2 else None
    if width is None or (wants_classes and width != num_classes):
        want = num_classes if wants_classes else "classes"
        raise ModelError(f"--model {name}: output shape must be (None, {want}) logits; got {out}")
    if width < num_classes:
        raise ModelError(
            f"--model {name}: output width must cover the labels 0-{num_classes - 1} "
            f"({num_classes} logits); got {width}"
        )
    return model
