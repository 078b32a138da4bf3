"""The one line kept of TensorFlow's long error messages (:func:`trainer.errors.first_line`)."""

from __future__ import annotations

import pytest
import tensorflow as tf

from tests.trainer.messages import PEER_LOST, PEER_LOST_LINE
from trainer.errors import first_line


@pytest.mark.parametrize(
    ("message", "line"),
    [
        ("not an sstable (bad magic number)", "not an sstable (bad magic number)"),
        ("first\nsecond", "first"),
        (PEER_LOST, PEER_LOST_LINE),
        (
            "{{function_node __wrapped__SaveV2_dtypes_5_device_/job:localhost/replica:0/task:0/"
            "device:CPU:0}} /ckpt/ckpt-2_temp/part; No space left on device [Op:SaveV2]",
            "/ckpt/ckpt-2_temp/part; No space left on device [Op:SaveV2]",
        ),
        ("", "UnknownError"),
    ],
    ids=["one-line", "two-lines", "peer-lost", "function-node", "empty"],
)
def test_first_line_keeps_the_cause(message: str, line: str):
    assert first_line(tf.errors.UnknownError(None, None, message)) == line
