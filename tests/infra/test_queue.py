"""The cluster's queue (Kueue, docs/queue.md): the workers' labels, the stack's own LocalQueue
and the settings the stack refuses with a queue."""

from __future__ import annotations

import pytest

from infra.config import PROJECT, ConfigError
from tools.render import Recorder, render_stack
from trainer.contract import QUEUE_LABEL, QUEUE_PRIORITY_CLASS_LABEL

P = f"{PROJECT}:"
QUEUED = {P + "queueName": "team", P + "autoscalingEnabled": False}


def _local_queues(result) -> list[dict]:
    return result.by_kind("LocalQueue")


def test_no_queue_by_default_changes_nothing():
    result = render_stack("prod")
    labels = result.one("StatefulSet")["metadata"]["labels"]
    assert QUEUE_LABEL not in labels and QUEUE_PRIORITY_CLASS_LABEL not in labels, labels
    assert _local_queues(result) == []


def test_a_platform_queue_labels_the_workers_only():
    result = render_stack("dev", {**QUEUED, P + "queuePriorityClass": "research-high"})
    labels = result.one("StatefulSet")["metadata"]["labels"]
    assert labels[QUEUE_LABEL] == "team"
    assert labels[QUEUE_PRIORITY_CLASS_LABEL] == "research-high"
    # The label is on the StatefulSet: Kueue's webhooks put it on each pod themselves.
    assert QUEUE_LABEL not in result.one("StatefulSet")["spec"]["template"]["metadata"]["labels"]
    assert _local_queues(result) == []


def test_the_stack_creates_its_local_queue_before_the_workers():
    recorder = Recorder()
    result = render_stack("dev", {**QUEUED, P + "queueClusterQueue": "tfd-gpus"}, recorder)
    (queue,) = _local_queues(result)
    assert queue["apiVersion"] == "kueue.x-k8s.io/v1beta2"
    assert queue["metadata"]["name"] == "team"
    assert queue["metadata"]["namespace"] == result.one("StatefulSet")["metadata"]["namespace"]
    assert queue["spec"] == {"clusterQueue": "tfd-gpus"}
    (sts,) = [r for r in recorder.resources if r.kind == "StatefulSet" and r.is_manifest]
    assert any(d.endswith(":LocalQueue::local-queue") for d in sts.dependencies), sts.dependencies


@pytest.mark.parametrize(
    ("overrides", "key", "rule"),
    [
        ({P + "queueName": "team", P + "autoscalingEnabled": True}, "autoscalingEnabled",
         "must be false with queueName set"),
        ({P + "queueClusterQueue": "tfd-gpus"}, "queueClusterQueue", "needs queueName"),
        ({P + "queuePriorityClass": "high"}, "queuePriorityClass", "needs queueName"),
        ({**QUEUED, P + "queueName": "Team_A"}, "queueName", "must be a lowercase DNS label"),
        ({**QUEUED, P + "queueName": "q" * 64}, "queueName", "at most 63 characters"),
        ({**QUEUED, P + "queueClusterQueue": "GPUs"}, "queueClusterQueue",
         "must be a ClusterQueue name"),
    ],
)  # fmt: skip
def test_queue_settings_refused(overrides, key, rule):
    recorder = Recorder()
    with pytest.raises(ConfigError) as caught:
        render_stack("dev", overrides, recorder=recorder)
    lines = [p for p in caught.value.problems if p.startswith(f"{P}{key}:")]
    assert any(rule in line for line in lines), caught.value.problems
    assert recorder.resources == []
