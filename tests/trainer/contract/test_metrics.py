"""The exported metric names."""

from __future__ import annotations

from trainer import contract


def test_metric_names_are_unique_and_prefixed():
    assert len(set(contract.METRIC_NAMES)) == len(contract.METRIC_NAMES)
    assert all(name.startswith("tfd_") for name in contract.METRIC_NAMES)
