"""tf-keras must be selected before any test module imports TensorFlow; the fake Kubernetes API
the lifecycle tests share."""

import os
from collections.abc import Iterator

import pytest

from tests.trainer.fake_api import FakeApi

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


@pytest.fixture
def api() -> Iterator[FakeApi]:
    """A fake API whose StatefulSet has 1 replica at revision ``rev-a`` (test_k8s has its own)."""
    fake = FakeApi(replicas=1, update_revision="rev-a").start()
    yield fake
    fake.stop()
