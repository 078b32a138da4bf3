"""``python -m benchmarks.scale`` (``make bench-scale``): the stack at 8, 64 and 512 workers on
the kwok cluster of ``make cluster-up`` (simulated nodes: pods are scheduled and Ready, no
container runs), with the real Pulumi engine and provider (``tests/e2e/harness.py``).

Per worker count it measures, on a fresh stack of the e2e stack file:

* ``pulumi preview`` of the new stack, ``pulumi up``, a no-change ``preview`` after it and
  ``pulumi destroy`` (seconds), and the time from the start of ``up`` until every worker is
  Ready (``podManagementPolicy: Parallel``);
* every API request the cluster served during ``up`` (the engine's, the controllers' and
  kwok's: ``apiserver_request_total`` before and after);
* the size of every object of the stack as stored (JSON with ``managedFields``), its
  annotations, the Role's pod names, the worker pods together, and the stack's state;
* what the trainer side asks of the API (``trainer.contract.API_CALLS``, one request each: a
  worker's start-up read, the chief's poll, a rollout's deletes), per minute of steady training
  and per event, from the counts the trainer makes (``trainer/lifecycle.py``, ``trainer/watch.py``);
* the Prometheus series of one run: the samples one worker's ``/metrics`` exposition holds
  (``trainer.metrics``, rendered here) times the workers.

Then every figure's growth exponent with the worker count (``benchmarks.scale_figures``) and a
line per defect: faster than linear, or an object near a Kubernetes size limit. Writes JSON
with ``--json``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.scale_figures import growths, table, verdicts
from tests.e2e.harness import KUBECONFIG, Kube, Project
from tools.cluster import kwok_node
from trainer.contract.flags import TrainerFlags

SIZES = (8, 64, 512)
STATEFULSET = "tfd-worker"
KINDS = (
    "statefulsets.apps", "services", "roles.rbac.authorization.k8s.io",
    "rolebindings.rbac.authorization.k8s.io", "networkpolicies.networking.k8s.io",
    "poddisruptionbudgets.policy", "resourcequotas", "limitranges", "serviceaccounts",
    "persistentvolumeclaims", "horizontalpodautoscalers.autoscaling", "configmaps",
)  # fmt: skip
PODS_PER_NODE = 110
"""kwok's node capacity in pods (``tools.cluster.kwok_node``)."""
NODE_PREFIX = "tfd-scale-"


class ScaleError(RuntimeError):
    """The cluster is not there, or a measurement could not be taken (one line)."""


def stored_size(obj: dict[str, Any]) -> int:
    return len(json.dumps(obj, separators=(",", ":")).encode())


def annotations_size(obj: dict[str, Any]) -> int:
    notes = obj.get("metadata", {}).get("annotations") or {}
    return sum(len(k.encode()) + len(str(v).encode()) for k, v in notes.items())


def api_requests(kube: Kube) -> float:
    """``apiserver_request_total`` summed over every label: the requests served so far."""
    total = 0.0
    for line in kube.run("get", "--raw", "/metrics").splitlines():
        if line.startswith("apiserver_request_total{"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def series_per_worker(world_size: int) -> int:
    """Samples in one worker's ``/metrics`` exposition, as the trainer renders it."""
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from trainer.metrics import Metrics

    text = generate_latest(Metrics(task_index=0, world_size=world_size).registry).decode()
    return sum(len(family.samples) for family in text_string_to_metric_families(text))


def trainer_api_figures(workers: int) -> dict[str, float]:
    """The trainer side's API requests at ``workers``: each start-up reads the StatefulSet once
    (``trainer/lifecycle.py``), the chief alone polls it every ``--replicas-poll`` seconds
    (``trainer/watch.py``), a rollout deletes every pod and each new one reads again."""
    poll_s = TrainerFlags().replicas_poll
    return {
        "trainer API requests per minute, steady": 60.0 / poll_s,
        "trainer API requests, all workers starting": float(workers),
        "trainer API requests, one rollout": 2.0 * workers,
    }


def add_nodes(kube: Kube, workers: int) -> list[str]:
    """Enough kwok nodes for ``workers`` pods besides the cluster's own two."""
    count = math.ceil(workers / (PODS_PER_NODE - 10))
    names = [f"{NODE_PREFIX}{i}" for i in range(count)]
    docs = [kwok_node(n, gpus=0, cpu="1000", memory="4000Gi") for n in names]
    kube.run(
        "apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs})
    )
    kube.wait_for(
        f"{count} kwok nodes Ready",
        lambda: all(_node_ready(kube.get("node", n)) for n in names),
        120, 1,
    )  # fmt: skip
    return names


def _node_ready(node: dict | None) -> bool:
    conditions = (node or {}).get("status", {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def measure(workers: int, work: Path, kube: Kube) -> dict[str, Any]:
    namespace = f"tfd-scale-{workers}"
    project = Project(
        work / f"project-{workers}", f"scale{workers}", stack_file="e2e", backend=work / "backend"
    )
    project.set("kubeconfig", KUBECONFIG.read_text(), secret=True)
    project.set_many({
        "namespace": namespace, "replicas": workers, "autoscalingEnabled": False,
        "cpuRequest": "10m", "cpuLimit": "20m", "memoryRequest": "16Mi", "memoryLimit": "32Mi",
        "checkpointRetention": "Delete",
        "imageReference": "registry.example/tfd/trainer@sha256:" + "5" * 64,
    })  # fmt: skip
    figures: dict[str, float] = {}
    figures["pulumi preview, new stack (s)"] = project.preview().seconds
    ready_at: list[float] = []
    started = time.monotonic()

    def watch_ready() -> None:
        while time.monotonic() - started < 1800 and not ready_at:
            if (kube.ready_replicas(STATEFULSET, namespace) or 0) >= workers:
                ready_at.append(time.monotonic())
                return
            time.sleep(0.5)

    watcher = threading.Thread(target=watch_ready, daemon=True)
    before = api_requests(kube)
    watcher.start()
    up = project.up()
    watcher.join(timeout=1800)
    figures["API requests served during up"] = api_requests(kube) - before
    figures["pulumi up (s)"] = up.seconds
    if not ready_at:
        raise ScaleError(f"{namespace}: {workers} workers not Ready within 1800 s")
    figures["up start to every worker Ready (s)"] = ready_at[0] - started
    figures["pulumi preview, no changes (s)"] = project.preview(expect_no_changes=True).seconds

    objects: dict[str, dict[str, int]] = {}
    for kind in KINDS:
        listed = json.loads(kube.run("get", kind, "-n", namespace, "-o", "json",
                                     "--show-managed-fields"))["items"]  # fmt: skip
        for obj in listed:
            key = f"{obj['kind']}/{obj['metadata']['name']}"
            objects[key] = {"bytes": stored_size(obj), "annotations": annotations_size(obj)}
    ns = kube.get("namespace", namespace)
    objects[f"Namespace/{namespace}"] = {
        "bytes": stored_size(ns),
        "annotations": annotations_size(ns),
    }
    pods = json.loads(kube.run("get", "pods", "-n", namespace, "-o", "json",
                               "--show-managed-fields"))["items"]  # fmt: skip
    [role] = [o for k, o in objects.items() if k.startswith("Role/")] or [{"bytes": 0}]
    role_obj = json.loads(kube.run("get", "roles.rbac.authorization.k8s.io", "-n", namespace,
                                   "-o", "json"))["items"][0]  # fmt: skip
    figures["Role (bytes)"] = role["bytes"]
    figures["Role pod names"] = sum(
        len(r.get("resourceNames") or []) for r in role_obj["rules"] if "pods" in r["resources"]
    )
    [sts] = [o for k, o in objects.items() if k.startswith("StatefulSet/")]
    figures["StatefulSet (bytes)"] = sts["bytes"]
    figures["worker pods together (bytes)"] = sum(stored_size(p) for p in pods)
    figures["one worker pod (bytes, mean)"] = figures["worker pods together (bytes)"] / len(pods)
    figures["objects of the stack together (bytes)"] = sum(o["bytes"] for o in objects.values())
    figures["stack state (bytes)"] = len(project.export_text().encode())
    figures.update(trainer_api_figures(workers))
    figures["Prometheus series per run"] = workers * series_per_worker(workers)
    figures["pulumi destroy (s)"] = project.destroy().seconds
    project.stack.workspace.remove_stack(project.stack.name)
    largest = max(objects.items(), key=lambda kv: kv[1]["bytes"])
    noted = max(objects.items(), key=lambda kv: kv[1]["annotations"])
    return {
        "workers": workers,
        "figures": {k: round(v, 3) for k, v in figures.items()},
        "objects": objects,
        "largest_object": [largest[0], largest[1]["bytes"]],
        "largest_annotations": [noted[0], noted[1]["annotations"]],
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.scale",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--workers", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    sizes = sorted(args.workers)
    if not KUBECONFIG.exists():
        print(
            "bench-scale: no local cluster (make cluster-up starts the kwok one)", file=sys.stderr
        )
        return 2
    kube = Kube()
    nodes = add_nodes(kube, max(sizes))
    results = []
    try:
        with tempfile.TemporaryDirectory(prefix="tfd-scale-") as tmp:
            for n in sizes:
                print(f"[scale] {n} workers ...", flush=True)
                results.append(measure(n, Path(tmp), kube))
                print(json.dumps(results[-1]["figures"]), flush=True)
    except (ScaleError, AssertionError) as err:
        print(f"bench-scale: {err}", file=sys.stderr)
        return 1
    finally:
        kube.run("delete", "node", *nodes, "--wait=false", check=False)
    grown = growths(sizes, [r["figures"] for r in results])
    print("\n".join(table(sizes, grown)))
    defects = verdicts(
        sizes,
        grown,
        tuple(results[-1]["largest_object"]),
        tuple(results[-1]["largest_annotations"]),
    )
    print("\n".join(defects) if defects else "no figure grows faster than linearly; no object "
          "is near a size limit")  # fmt: skip
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        doc = {
            "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                        "load_at_start": os.getloadavg()},
            "sizes": sizes,
            "runs": results,
            "growth": [{"figure": g.name, "values": g.values, "exponents": g.exponents}
                       for g in grown],
            "defects": defects,
        }  # fmt: skip
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
