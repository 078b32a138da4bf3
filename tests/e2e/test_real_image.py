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

    def running() -> dict | None:
        pod = kube.get("pod", f"{STATEFULSET}-0", NS)
        statuses = (pod or {}).get("status", {}).get("containerStatuses") or []
        return pod if statuses and "running" in statuses[0].get("state", {}) else None

    pod = kube.wait_for("worker 0 running the pulled image", running, 600, 2)
    print(f"[real-node figure] pulumi up (build, push) to a running pulled worker: "
          f"{time.monotonic() - started:.1f} s")  # fmt: skip
    assert pod["spec"]["nodeName"] == real_node
    status = pod["status"]["containerStatuses"][0]
    assert pod["spec"]["containers"][0]["image"] == reference, pod["spec"]["containers"][0]
    assert status["imageID"].endswith(digest), status  # what containerd pulled and runs

    def done() -> dict | None:
        runs = {r["run_id"]: r for r in runs_of(project)}
        return runs.get("pulled") if runs.get("pulled", {}).get("state") == "done" else None

    record = kube.wait_for("the run done in its records", done, 600, 10)
    assert record["image"] == reference and record["image_digest"] == digest, record
    human = tfd(project, "runs")
    assert human.returncode == 0, human.stderr
    print(f"[tfd output] tfd runs:\n{human.stdout}")
    project.destroy()
