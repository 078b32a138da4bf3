"""make gpu-check: what it measures on which GPUs, and its one line on a machine without."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import gpu_check


@pytest.mark.parametrize(
    ("caps", "expected"),
    [
        ([], ["fp32"]),
        ([(6, 0)], ["fp32"]),
        ([(7, 0)], ["fp32", "fp16"]),
        ([(8, 0), (9, 0)], ["fp32", "bf16", "fp16"]),
        ([(8, 6), (7, 5)], ["fp32", "fp16"]),  # bf16 needs it on every GPU
    ],
)
def test_the_precisions_measured_follow_the_trainers_rule(caps, expected):
    assert gpu_check.precisions(caps) == expected, caps


def test_without_a_gpu_it_says_so_and_exits_0(tmp_path: Path, capsys, monkeypatch):
    monkeypatch.setattr(gpu_check, "_gpus", lambda: ([], []))
    out = tmp_path / "gpu.json"
    assert gpu_check.main(["--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "gpu-check: no GPU visible to TensorFlow on this machine: nothing to measure" in printed
    doc = json.loads(out.read_text())
    assert doc["skipped"] == "no GPU visible to TensorFlow" and doc["gpus"] == [], doc


def test_the_summary_puts_the_trainer_beside_keras():
    runs = [
        {"what": "trainer", "gpus": 1, "precision": "fp32", "examples_per_sec": 9000.0},
        {"what": "trainer", "gpus": 1, "precision": "fp32", "examples_per_sec": 11000.0},
        {"what": "keras", "gpus": 1, "precision": "fp32", "examples_per_sec": 10000.0},
        {"what": "trainer", "gpus": 4, "precision": "fp32", "examples_per_sec": 36000.0},
    ]
    assert gpu_check.summary_lines({"runs": runs}) == [
        "fp32 on 1 GPU(s): trainer 10,000 examples/s, plain tf-keras 10,000 (ratio 1.000)",
        "fp32 on 4 GPU(s): trainer 36,000 examples/s",
    ]
