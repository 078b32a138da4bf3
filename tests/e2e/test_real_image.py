"""The real node runs the image ``pulumi up`` built and pushed: a cloud stack pushes through the
stand-in Docker provider to the private registry (``tests/e2e/test_image_build.py``), the node's
containerd pulls the digest over TLS with its own credentials (as a cloud node pulls from its
registry), the worker trains, and ``tfd runs`` records that digest.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.e2e import realnode
from tests.e2e.harness import Kube, Project
from tests.e2e.test_image_build import REPOSITORY, STATEFULSET, stand_in_plugin  # noqa: F401
from tests.e2e.test_tfd import project_with_program, tfd
from tools import cluster
from tools.real_node_config import registry_hosts_dir
from tools.registry import USER, Registry

pytestmark = [pytest.mark.real_node, pytest.mark.timeout(1200)]
NS = "tfd-pulled"
TAG = "e2e-pull"


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    server = Registry(tmp_path_factory.mktemp("registry"))
    server.start()
    server.trust_from_node(registry_hosts_dir(cluster.STATE))
    try:
        yield server
    finally:
        server.stop()


def runs_of(project: Project) -> list[dict[str, Any]]:
    result = tfd(project, "runs", "--json", timeout=300)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    return json.loads(result.stdout)["runs"]


def test_the_node_pulls_the_pushed_digest_and_tfd_runs_records_it(
    new_project: Callable[..., Project], kube: Kube, registry: Registry, real_node: str
) -> None:
    project = project_with_program(new_project("pulled", stack_file="e2e"))
    project.set("kubeconfig", realnode.KUBECONFIG.read_text(), secret=True)
    project.set_many(
        {
            **realnode.stack_settings(NS, ""),
            "clusterKind": "cloud",
            "imageRegistry": f"{registry.server}/tfd",
            "imageRegistryUsername": USER,
            "imageTag": TAG,
            "autoscalingEnabled": False,
            "replicas": 1,
            "epochs": 1,
            "stepsPerEpoch": 40,
            "runId": "pulled",
        }
    )
    project.set("imageRegistryPassword", registry.password, secret=True)
    started = time.monotonic()
    project.up()
    digest = registry.manifest_digest(f"tfd/{REPOSITORY}", TAG)
    assert digest, f"the registry has no {REPOSITORY}:{TAG}"
    reference = f"{registry.server}/tfd/{REPOSITORY}@{digest}"

    def done() -> dict | None:
        runs = {r["run_id"]: r for r in runs_of(project)}
        return runs.get("pulled") if runs.get("pulled", {}).get("state") == "done" else None

    # One short epoch: the run is DONE and its pods gone within seconds of starting, so the
    # proof is what the kubelet and containerd recorded, not a pod caught running.
    record = kube.wait_for("the run done in its records", done, 600, 5)
    print(f"[real-node figure] pulumi up (build, push) to the pulled run DONE: "
          f"{time.monotonic() - started:.1f} s")  # fmt: skip
    assert record["image"] == reference and record["image_digest"] == digest, record
    pulls = [
        event
        for event in kube.items("event", NS)
        if event.get("reason") == "Pulled" and event["involvedObject"]["name"] == f"{STATEFULSET}-0"
    ]
    assert any(reference in event.get("message", "") for event in pulls), pulls
    held = [line.split() for line in realnode.ctr("images", "ls").splitlines()[1:]]
    assert [reference, digest] in [[fields[0], fields[2]] for fields in held], (
        f"the node's containerd holds no {reference}"
    )
    human = tfd(project, "runs")
    assert human.returncode == 0, human.stderr
    print(f"[tfd output] tfd runs:\n{human.stdout}")
    project.destroy()
