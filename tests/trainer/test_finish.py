"""``summary.json`` is strict JSON whatever the figures, and a diverged run writes none."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from trainer import finish
from trainer.errors import EXIT_DIVERGED
from trainer.local_cluster import worker_envs


def _strict(text: str) -> dict:
    """Parse as a strict JSON reader does: Python's own parser accepts NaN and Infinity."""

    def refuse(token: str) -> None:
        raise ValueError(f"not JSON: {token}")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_figures_are_written_as_null(bad: float):
    summary = {"run_id": "r1", "final_step": 8, "loss": bad, "accuracy": 0.25, "eval_loss": None}
    text = finish.summary_text(summary)
    assert text.endswith("}\n") and text.count("\n") == 1, text
    assert _strict(text) == {**summary, "loss": None}, text


NAN_LOSS = """
import tensorflow as tf


def loss(labels, logits):  # cross-entropy times NaN: the gradients, weights and loss go NaN
    per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(tf.cast(labels, tf.int32), logits)
    return per_example * float("nan")
"""


@pytest.mark.slow
def test_a_diverged_run_stops_before_any_summary(tmp_path: Path):
    """A NaN training loss never reaches ``summary.json``: the run stops with exit 8 before it
    saves or finishes anything (the figures that can still be non-finite, such as an
    evaluation's, are written as null: the test above)."""
    (tmp_path / "nan_loss.py").write_text(NAN_LOSS)
    env = worker_envs(1, str(tmp_path / "run"))[0]
    env["PYTHONPATH"] = f"{tmp_path}:{env.get('PYTHONPATH', '')}"
    proc = subprocess.run(
        [sys.executable, "-m", "trainer", "--loss", "nan_loss:loss", "--epochs", "1",
         "--synthetic-examples", "256", "--batch-size", "32", "--on-done", "exit",
         "--intra-op-threads", "1", "--log-every", "60"],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == EXIT_DIVERGED, proc.stderr[-2000:]
    assert "training diverged" in proc.stderr.splitlines()[-1], proc.stderr[-2000:]
    for name in ("summary.json", "DONE"):
        assert not (tmp_path / "run" / name).exists(), f"{name} written by a diverged run"
