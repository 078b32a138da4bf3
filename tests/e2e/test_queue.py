"""A shared GPU cluster through Kueue (docs/queue.md): two stacks name the same LocalQueue's
ClusterQueue, whose quota holds one run's GPUs; Kueue's own admission, against the real API
server, lets exactly one run in at a time, all of its workers or none.

Kueue runs on the host (``tools/kueue.py``, docs/e2e.md); the platform's objects (a
ResourceFlavor, a ClusterQueue of 2 GPUs) are applied here with kubectl, as a platform team
would. The tests of this module run in order and share the two stacks.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator

import pytest

from tests.e2e.harness import KUBECONFIG, Kube, Project
from tests.e2e.test_real_tfd import Background as TfdCommand
from tests.e2e.test_tfd import project_with_program, status, tfd
from tools.kueue import Kueue
from trainer.contract.api import QUEUE_ADMISSION_GATE, QUEUE_LABEL

STATEFULSET = "tfd-worker"
NAMESPACES = ("tfd-queue-a", "tfd-queue-b")
QUEUE = "team"
CLUSTER_QUEUE = "tfd-gpus"
GPU_LABEL = "cloud.google.com/gke-accelerator=nvidia-tesla-t4"  # tools/cluster.py GPU_NODE
GPU_TAINT = "nvidia.com/gpu=present:NoSchedule"
WORKERS = 2
UP_TIMEOUT_S = 120
SUBMIT_WAIT = "15s"
"""``tfd submit --timeout`` of the held stack and of the resize: how long each waits for a first
step once admitted (kwok runs no trainer, so each wait ends there)."""
PLATFORM = {
    "apiVersion": "v1",
    "kind": "List",
    "items": [
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": "gpu-t4"},
            "spec": {"nodeLabels": {"cloud.google.com/gke-accelerator": "nvidia-tesla-t4"}},
        },
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": CLUSTER_QUEUE},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                        "flavors": [
                            {
                                "name": "gpu-t4",
                                "resources": [
                                    {"name": "cpu", "nominalQuota": "8"},
                                    {"name": "memory", "nominalQuota": "32Gi"},
                                    # One run of 2 workers with 1 GPU each.
                                    {"name": "nvidia.com/gpu", "nominalQuota": 2},
                                ],
                            }
                        ],
                    }
                ],
            },
        },
    ],
}


@pytest.fixture(scope="module")
def kueue(tmp_path_factory: pytest.TempPathFactory, kube: Kube) -> Iterator[Kueue]:
    controller = Kueue(tmp_path_factory.mktemp("kueue"))
    controller.start()
    print(f"[tfd figure] kueue start to ready with webhooks: {controller.ready_s:.1f} s")
    try:
        yield controller
    finally:
        controller.stop()


def platform_objects(kube: Kube, objects: dict, cluster_queue: str) -> Iterator[None]:
    """A platform team's objects (a List) applied until ``cluster_queue`` is Active, deleted
    when the generator resumes: the body of each module's ``platform`` fixture."""
    kube.run("apply", "-f", "-", stdin=json.dumps(objects))
    kube.wait_for(
        f"ClusterQueue {cluster_queue} active",
        lambda: (
            condition(kube.get("clusterqueue", cluster_queue) or {}, "Active").get("status")
            == "True"
        ),
        timeout=60,
    )
    yield
    kube.run("delete", "-f", "-", "--ignore-not-found", "--wait=false", stdin=json.dumps(objects),
             check=False)  # fmt: skip


@pytest.fixture(scope="module")
def platform(kueue: Kueue, kube: Kube) -> Iterator[None]:
    yield from platform_objects(kube, PLATFORM, CLUSTER_QUEUE)


@pytest.fixture(scope="module")
def stacks(new_project: Callable[..., Project], platform: None) -> Iterator[list[Project]]:
    made = []
    for namespace in NAMESPACES:
        project = new_project(namespace.removeprefix("tfd-").replace("-", ""), stack_file="e2e")
        project.set("kubeconfig", KUBECONFIG.read_text(), secret=True)
        project.set_many({
            "namespace": namespace, "namespaceMode": "create", "replicas": WORKERS,
            "autoscalingEnabled": False, "gpusPerWorker": 1, "checkpointRetention": "Delete",
            "queueName": QUEUE, "queueClusterQueue": CLUSTER_QUEUE,
        })  # fmt: skip
        project.set("gpuNodeSelector", [GPU_LABEL])
        project.set("gpuTolerations", [GPU_TAINT])
        made.append(project)
    yield made
    # While Kueue still runs: its finalizers on the pods and queues need it to go.
    for project in reversed(made):
        try:
            project.destroy()
        except Exception as exc:  # noqa: BLE001 - the session's cleanup tries again
            print(f"destroy of {project.stack.name}: {exc}")


def pods(kube: Kube, namespace: str) -> list[dict]:
    return kube.items("pod", namespace, "app.kubernetes.io/instance=tfd")


def scheduled(pod: dict) -> bool:
    return bool(pod["spec"].get("nodeName"))


def gated(pod: dict) -> bool:
    return any(g["name"] == QUEUE_ADMISSION_GATE for g in pod["spec"].get("schedulingGates") or [])


def workload(kube: Kube, namespace: str) -> dict:
    (item,) = kube.items("workloads.kueue.x-k8s.io", namespace)
    return item


def condition(wl: dict, kind: str) -> dict:
    for c in wl.get("status", {}).get("conditions", []):
        if c["type"] == kind:
            return c
    return {}


class Background(TfdCommand):
    """``tfd submit`` of the held stack in a subprocess: its ``pulumi up`` waits for the workers
    to be admitted, and ``submit`` shows the queue's reason meanwhile (``--json`` lines)."""

    def __init__(self, project: Project) -> None:
        super().__init__(project_with_program(project), "submit", "--run-id", "r1", "--json",
                         "--timeout", SUBMIT_WAIT)  # fmt: skip
        self.code: int | None = None

    def join(self, timeout: float) -> None:
        """Wait for the submit: kwok runs no trainer, so once admitted it waits --timeout for a
        first step and exits 3."""
        if self.code is None:
            self.code = self.wait(timeout)
        assert self.code == 3, f"tfd submit exited {self.code}:\n{self.text()}"


@pytest.fixture(scope="module")
def second_up(stacks: list[Project], kube: Kube) -> Iterator[Background]:
    first, second = stacks
    started = time.monotonic()
    first.up()
    took = time.monotonic() - started
    print(f"[tfd figure] first queued stack: up (admitted, 2 Ready) in {took:.1f} s")
    up = Background(second)
    kube.wait_for("the second stack's 2 pods", lambda: len(pods(kube, NAMESPACES[1])) == WORKERS)
    yield up
    up.stop()


def test_one_run_is_admitted_whole_the_other_held_whole(second_up: Background, kube: Kube) -> None:
    running, held = (pods(kube, ns) for ns in NAMESPACES)
    assert [p["metadata"]["name"] for p in running if scheduled(p)] == [
        f"{STATEFULSET}-0",
        f"{STATEFULSET}-1",
    ], [p["spec"].get("nodeName") for p in running]
    # Never half of one: both of the held run's pods wait behind Kueue's gate.
    kube.wait_for(
        "the held run's pods gated",
        lambda: all(gated(p) and not scheduled(p) for p in pods(kube, NAMESPACES[1])) or None,
        timeout=30,
    )
    wl = kube.wait_for(
        "the held run's Workload judged",
        lambda: (w := workload(kube, NAMESPACES[1])) and condition(w, "QuotaReserved") and w,
        timeout=60,
    )
    reserved = condition(wl, "QuotaReserved")
    print(f"[tfd figure] held Workload: {reserved['reason']}: {reserved['message']}")
    assert reserved["status"] == "False", reserved
    assert condition(wl, "Admitted").get("status") != "True", wl["status"]
    assert "nvidia.com/gpu" in reserved["message"], reserved
    admitted = condition(workload(kube, NAMESPACES[0]), "Admitted")
    assert admitted.get("status") == "True", admitted


def test_tfd_status_says_queued_with_kueues_reason(
    second_up: Background, stacks: list[Project], kube: Kube
) -> None:
    held = stacks[1]
    last: list[dict] = []

    def says_queued() -> dict | None:
        last[:] = [status(held)]
        s = last[0]
        return s if s["phase"] == "queued" and "nvidia.com/gpu" in s["reason"] else None

    try:
        seen = kube.wait_for("tfd status: queued with Kueue's reason", says_queued, timeout=60)
    except AssertionError:
        events = [
            (e.get("lastTimestamp"), e.get("reason"), e.get("message"))
            for e in kube.items("event", NAMESPACES[1])
            if e["involvedObject"]["kind"] == "Workload"
        ]
        raise AssertionError(f"last tfd status {last}; the Workload's events {events}") from None
    assert seen["reason"].startswith(f"{WORKERS}/{WORKERS} workers held"), seen["reason"]
    human = tfd(held, "status")
    print(f"[tfd output] tfd status of the held run:\n{human.stdout}")
    assert human.returncode == 0, human.stderr
    assert "queued" in human.stdout and "nvidia.com/gpu" in human.stdout, human.stdout


def test_an_admitted_stack_previews_without_changes(
    second_up: Background, stacks: list[Project]
) -> None:
    # Kueue's webhooks mutated the StatefulSet (template labels and annotations): the stack
    # must still see its own objects unchanged.
    stacks[0].preview(expect_no_changes=True)


@pytest.mark.parametrize(
    ("what", "args", "refused"),
    [
        ("replicas 2 -> 3 (spec)", ("patch", "statefulset", STATEFULSET, "--type=merge",
                                    "-p", '{"spec":{"replicas":3}}'), True),
        # The scale subresource is not a `statefulsets` request: Kueue's webhooks never see it.
        ("replicas 2 -> 3 (scale subresource)",
         ("scale", "statefulset", STATEFULSET, "--replicas=3"), False),
        # Kueue 0.17 admits a new pod template of an admitted StatefulSet.
        ("pod template change", ("patch", "statefulset", STATEFULSET, "--type=json", "-p",
                                 '[{"op":"add","path":"/spec/template/spec/containers/0/env/-",'
                                 '"value":{"name":"TFD_PROBE","value":"x"}}]'), False),
        ("queue-name change", ("label", "statefulset", STATEFULSET,
                               f"{QUEUE_LABEL}=other", "--overwrite"), True),
    ],
)  # fmt: skip
def test_what_kueue_refuses_on_a_running_queued_statefulset(
    second_up: Background, kube: Kube, what: str, args: tuple[str, ...], refused: bool
) -> None:
    namespace = NAMESPACES[0]
    before = kube.get("statefulset.apps", STATEFULSET, namespace)
    out = kube.run(*args, "-n", namespace, "--dry-run=server", check=False)
    after = kube.get("statefulset.apps", STATEFULSET, namespace)
    denied = "denied the request" in out or "Forbidden" in out or "Invalid" in out
    print(f"[tfd figure] kueue on {what}: {'refused: ' + out.strip() if denied else 'admitted'}")
    assert after["metadata"]["generation"] == before["metadata"]["generation"], what
    assert denied is refused, f"{what}: {'refused' if denied else 'admitted'} by Kueue: {out}"


def quota_refusals(kube: Kube, namespace: str, pod: str) -> list[str]:
    """The controller's FailedCreate events of ``pod`` refused by a ResourceQuota."""
    return [
        e["message"]
        for e in kube.items("event", namespace)
        if e.get("reason") == "FailedCreate" and pod in e.get("message", "")
        and "exceeded quota" in e.get("message", "")
    ]  # fmt: skip


def test_what_an_hpa_style_scale_up_does_to_a_queued_run(second_up: Background, kube: Kube) -> None:
    # The HPA resizes through the scale subresource, which Kueue's StatefulSet webhooks do not
    # see (their rules name `statefulsets` only): what becomes of the extra worker? Here the
    # stack's own ResourceQuota (pods and GPUs of `replicas` workers, autoscaling off) refuses
    # it before Kueue sees a pod.
    namespace = NAMESPACES[0]
    third = f"{STATEFULSET}-2"
    kube.run("scale", "statefulset", STATEFULSET, "-n", namespace, "--replicas=3")
    try:
        kube.wait_for(
            "a third pod, or its refusal",
            lambda: kube.get("pod", third, namespace) or quota_refusals(kube, namespace, third),
            timeout=30,
        )
        time.sleep(5)
        pod = kube.get("pod", third, namespace)
        wl = workload(kube, namespace)
        counts = [ps.get("count") for ps in wl["spec"]["podSets"]]
        fate = (
            f"worker 2 gated={gated(pod)} scheduled={scheduled(pod)}"
            if pod
            else f"worker 2 not created: {quota_refusals(kube, namespace, third)[-1]}"
        )
        print(
            f"[tfd figure] scale subresource 2 -> 3 of a queued run: accepted; {fate}; Workload "
            f"podSets count {counts}, admitted={condition(wl, 'Admitted').get('status')}"
        )
        # The admitted run keeps its workers whatever becomes of the extra one.
        running = [p for p in pods(kube, namespace) if scheduled(p)]
        assert {p["metadata"]["name"] for p in running} >= {f"{STATEFULSET}-0", f"{STATEFULSET}-1"}
        assert (
            pod is None or not scheduled(pod) or condition(wl, "Admitted").get("status") == "True"
        )
    finally:
        kube.run("scale", "statefulset", STATEFULSET, "-n", namespace, "--replicas=2")
        # Settled before the next scale: a scale to zero a second after this one once left
        # Kueue holding the first run's quota (the held run not admitted in 90 s).
        kube.wait_for(
            "the first run back at its 2 admitted workers",
            lambda: (
                len(pods(kube, namespace)) == WORKERS
                and all(scheduled(p) for p in pods(kube, namespace))
                and condition(workload(kube, namespace), "Admitted").get("status") == "True"
            ),
            timeout=60,
        )


def test_the_held_run_is_admitted_when_the_first_stops(
    second_up: Background, stacks: list[Project], kube: Kube
) -> None:
    kube.run("scale", "statefulset", STATEFULSET, "-n", NAMESPACES[0], "--replicas=0")
    stopped = time.monotonic()
    kube.wait_for("the first run's pods gone", lambda: pods(kube, NAMESPACES[0]) == [] or None)
    gone = time.monotonic() - stopped
    kube.wait_for(
        "the second run's 2 pods scheduled",
        lambda: len([p for p in pods(kube, NAMESPACES[1]) if scheduled(p)]) == WORKERS,
        timeout=90,
    )
    admitted = time.monotonic() - stopped
    print(f"[tfd figure] scale to 0 -> first run's pods gone {gone:.1f} s, "
          f"second run's pods scheduled {admitted:.1f} s")  # fmt: skip
    second_up.join(UP_TIMEOUT_S + 30)
    assert condition(workload(kube, NAMESPACES[1]), "Admitted").get("status") == "True"
    stacks[1].preview(expect_no_changes=True)
    # While its pulumi up waited, submit said why: the queue's reason, before the admission.
    phases = [(d["phase"], d.get("reason", "")) for d in second_up.docs() if "phase" in d]
    queued = [why for phase, why in phases if phase == "queued"]
    print(f"[tfd output] tfd submit of the held run, while held: {queued[:1]}")
    assert queued and "nvidia.com/gpu" in queued[0], phases
    assert phases[-1][0] != "queued", phases


def test_a_resize_of_a_queued_run_goes_through_zero_and_is_admitted_as_one_group(
    second_up: Background, stacks: list[Project], kube: Kube
) -> None:
    # Kueue refuses a new count of a running queued StatefulSet (above): `tfd submit` stops the
    # run first, waits for its workers to go, and `pulumi up` brings the new count from zero.
    second_up.join(UP_TIMEOUT_S)
    project, namespace = project_with_program(stacks[1]), NAMESPACES[1]
    started = time.monotonic()
    # kwok runs no trainer, so the run never logs a step: the wait ends at --timeout (exit 3).
    resized = tfd(project, "submit", "--continue", "--set", "replicas=1", "--timeout", SUBMIT_WAIT,
                  timeout=300)  # fmt: skip
    took = time.monotonic() - started
    out = resized.stdout + resized.stderr
    assert resized.returncode == 3, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    assert f"stopping the run's {WORKERS} workers" in out, out[-3000:]
    drained = next(line for line in out.splitlines() if f"{WORKERS} -> 0 workers in" in line)
    running = pods(kube, namespace)
    assert [p["metadata"]["name"] for p in running if scheduled(p)] == [f"{STATEFULSET}-0"], [
        (p["metadata"]["name"], p["spec"].get("nodeName")) for p in running
    ]
    wl = workload(kube, namespace)
    assert [ps.get("count") for ps in wl["spec"]["podSets"]] == [1], wl["spec"]["podSets"]
    assert condition(wl, "Admitted").get("status") == "True", wl["status"]
    print(f"[tfd figure] queued resize 2 -> 1 through zero: {drained.strip()}; submit to the "
          f"new group admitted and its --timeout 15s passed: {took:.1f} s")  # fmt: skip


def test_a_rollout_of_an_admitted_run_keeps_its_admission_and_its_quota(
    second_up: Background, kube: Kube
) -> None:
    # Last in the module: a scale to zero about a second after a rollout's pod replacement
    # once left Kueue 0.17.0 holding the run's quota (the next run never admitted), even after
    # Kueue had taken the new pods into the Workload, so no scenario runs after this one.
    # The other team's run asks for its 2 GPUs again: 1 is free (the resized run holds 1), so
    # it is held while this run's worker is replaced.
    namespace, held_namespace = NAMESPACES[1], NAMESPACES[0]
    kube.run("scale", "statefulset", STATEFULSET, "-n", held_namespace, f"--replicas={WORKERS}")
    kube.wait_for(
        "the other team's 2 workers held",
        lambda: len([p for p in pods(kube, held_namespace) if gated(p)]) == WORKERS,
        timeout=60,
    )
    running = [p["metadata"]["name"] for p in pods(kube, namespace)]
    admitted = workload(kube, namespace)["metadata"]["uid"]
    # A new template under OnDelete: each worker deletes its own pod at its next step
    # (docs/infra.md, Rollouts); kwok runs no trainer, so the test deletes them as they would.
    kube.run("patch", "statefulset", STATEFULSET, "-n", namespace, "--type=json", "-p",
             '[{"op":"add","path":"/spec/template/spec/containers/0/env/-",'
             '"value":{"name":"TFD_ROLLOUT_PROBE","value":"1"}}]')  # fmt: skip
    revision = kube.wait_for(
        "the new template's revision",
        lambda: (
            (kube.get("statefulset.apps", STATEFULSET, namespace) or {})
            .get("status", {})
            .get("updateRevision")
        ),
    )
    started = time.monotonic()
    kube.run("delete", "pod", *running, "-n", namespace, "--wait=false")

    def replaced() -> bool:
        now = pods(kube, namespace)
        held = pods(kube, held_namespace)
        # The other team's run never gets the quota while the workers are replaced.
        assert all(gated(p) and not scheduled(p) for p in held), [p["spec"] for p in held]
        owners = {
            o["uid"] for o in workload(kube, namespace)["metadata"].get("ownerReferences", [])
        }
        return len(now) == len(running) and all(
            scheduled(p) and not gated(p) and not p["metadata"].get("deletionTimestamp")
            and p["metadata"]["labels"].get("controller-revision-hash") == revision
            and p["metadata"]["uid"] in owners  # Kueue has taken the new pod into the group
            for p in now
        )  # fmt: skip

    kube.wait_for("the workers of the new template scheduled", replaced, timeout=90)
    took = time.monotonic() - started
    wl = workload(kube, namespace)
    print(f"[tfd figure] rollout of an admitted queued run: its worker of the new template "
          f"scheduled {took:.1f} s after its deletion, the other team's run held; the same "
          f"Workload: {wl['metadata']['uid'] == admitted}")  # fmt: skip
    assert condition(wl, "Admitted").get("status") == "True", wl["status"]
    assert wl["metadata"]["uid"] == admitted, "the rollout replaced the run's Workload"
