"""The worked examples of docs/trainer.md ("Extension points") run as written."""

from __future__ import annotations

import re
import runpy
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from trainer import data, model

DOC = Path(__file__).resolve().parents[2] / "docs" / "trainer.md"
EXAMPLE = re.compile(r"<!-- example: (\S+) -->\n```python\n(.*?)```", re.DOTALL)


def examples() -> dict[str, str]:
    return dict(EXAMPLE.findall(DOC.read_text()))


@pytest.fixture
def written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Every example saved under its file name in a fresh directory on sys.path and as cwd."""
    for name, code in examples().items():
        (tmp_path / name).write_text(code)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in examples():
        sys.modules.pop(name.removesuffix(".py"), None)


def test_the_three_extension_points_have_examples():
    assert set(examples()) == {"my_model.py", "write_records.py", "my_losses.py"}


def test_model_example(written: Path):
    net = model.build("my_model:build", (8, 8, 3), 100)
    assert net.output_shape == (None, 100)


def test_dataset_example(written: Path):
    (written / "records").mkdir()
    runpy.run_path(str(written / "write_records.py"))
    source = data.load(str(written / "records"), 1, 0, str(written), True)
    assert (source.num_examples, source.input_shape, source.num_classes) == (300, (8, 8, 3), 100)


def test_loss_example(written: Path):
    loss = model.load_loss("my_losses:smoothed")
    logits = tf.constant([[4.0, 0.0, 0.0], [0.0, 0.0, 4.0]])
    per_example = loss(tf.constant([0, 1]), logits).numpy()
    assert per_example.shape == (2,)
    assert per_example[0] < per_example[1], "a right guess must cost less than a wrong one"
    assert np.all(per_example > 0), "smoothing keeps every loss above 0"
