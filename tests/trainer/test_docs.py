"""The worked examples of docs/trainer.md ("Extension points") run as written, and its exit-code
table and launcher retry rule match trainer/errors.py and trainer/local.py."""

from __future__ import annotations

import re
import runpy
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from trainer import data, errors, local, model

DOC = Path(__file__).resolve().parents[2] / "docs" / "trainer.md"
EXAMPLE = re.compile(r"<!-- example: (\S+) -->\n```python\n(.*?)```", re.DOTALL)
EXIT_SECTION = re.compile(r"^## Exit codes \(`trainer/errors\.py`\)\n(.*?)(?=^## )", re.M | re.S)
EXIT_ROW = re.compile(r"^\| *(\d+) *\|", re.M)
NOT_RETRIED = re.compile(r"Exit codes (\d+)-(\d+) are not retried")


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


def test_the_exit_code_table_lists_exactly_the_codes_of_trainer_errors():
    section = EXIT_SECTION.search(DOC.read_text())
    assert section, "docs/trainer.md has no '## Exit codes (`trainer/errors.py`)' section"
    listed = [int(code) for code in EXIT_ROW.findall(section.group(1))]
    codes = {v for k, v in vars(errors).items() if k.startswith("EXIT_") and isinstance(v, int)}
    assert len(listed) == len(set(listed)), f"a code is listed twice: {sorted(listed)}"
    assert set(listed) == codes, (
        f"docs/trainer.md exit codes {sorted(listed)} != trainer/errors.py EXIT_* {sorted(codes)}"
    )


def test_the_launchers_retry_rule_matches_its_permanent_codes():
    (found,) = NOT_RETRIED.findall(DOC.read_text())
    documented = set(range(int(found[0]), int(found[1]) + 1))
    assert documented == set(local.PERMANENT_EXIT_CODES), (
        f"docs/trainer.md: codes {sorted(documented)} not retried; trainer/local.py "
        f"PERMANENT_EXIT_CODES {sorted(local.PERMANENT_EXIT_CODES)}"
    )
