"""A user's model module, as ``--model my_model:build`` imports it from ``codeDirectory``.

Small on purpose: a dense network over the records of ``write_records.py`` (8x8x1, 4 classes),
trained by the e2e run from this directory copied into the image (``/opt/tfd/code``).
"""

import tf_keras as k


def build(input_shape, num_classes):
    """An uncompiled tf-keras model that outputs ``num_classes`` logits."""
    return k.Sequential(
        [
            k.layers.InputLayer(input_shape=input_shape),
            k.layers.Flatten(),
            k.layers.Dense(32, activation="relu"),
            k.layers.Dense(num_classes),
        ],
        name="user_dense",
    )
