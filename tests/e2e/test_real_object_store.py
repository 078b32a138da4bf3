"""``checkpointUri: gs://...`` on the real node: a stack whose two workers train to ``DONE`` with
every record in a bucket, reached as a GKE pod reaches Cloud Storage.

The bucket is the GCS-compatible stand-in of :mod:`tools.object_store` on the node's bridge
(``OnHost``): the node's CoreDNS answers Google's API names with the address of
``private.googleapis.com`` (Private Google Access) and ``metadata.google.internal`` with the
metadata stand-in's, the stack's own NetworkPolicies must let the workers reach both, and the
workers' token comes from the metadata stand-in (the front answers 401 without it): no key
file anywhere. The trainer image is the repository's, with the stand-in's CA added to its trust
store (a TLS-inspecting proxy's CA is added the same way); docs/e2e.md says what this proves.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator

import pytest

from tests.e2e import realnode
from tests.e2e.harness import PROJECT, Kube, Project
from tests.e2e.test_image import REPOSITORY, built, docker  # noqa: F401 - fixtures and helper
from tests.e2e.test_real_training import log_figure
from tests.e2e.test_tfd import project_with_program, tfd
from tools.object_store import ObjectStore, OnHost, requests_so_far
from tools.real_node import NAMES
from tools.real_node_config import GOOGLE_APIS_IP, METADATA_IP
from trainer import contract
from trainer.checkpoints import CHECKPOINTS_SUBDIR
from trainer.finish import SUMMARY_FILE
from trainer.manifest import MANIFEST_FILE

pytestmark = [pytest.mark.real_node, pytest.mark.timeout(1200)]
NS = "tfd-gcs"
BUCKET = "tfd-e2e-gcs"
ROOT_PREFIX = "runs"
RUN_ID = "gcs"
EPOCHS, STEPS_PER_EPOCH, CHECKPOINT_EVERY = 2, 40, 20
FINAL_STEP = EPOCHS * STEPS_PER_EPOCH
PRIVATE_GOOGLE_ACCESS = f"{GOOGLE_APIS_IP}/30"
"""``private.googleapis.com``'s range, the egress a GKE private cluster allows for Google's
APIs; the stack lists it in ``egressHttpsCidrs``."""
TRUST_CA = """FROM {base}
USER 0:0
COPY object-store-ca.crt /usr/local/share/ca-certificates/object-store-ca.crt
RUN cat /usr/local/share/ca-certificates/object-store-ca.crt >> /etc/ssl/certs/ca-certificates.crt
USER 10001:10001
"""
"""TensorFlow's curl reads ``/etc/ssl/certs/ca-certificates.crt`` (compiled in) when
``CURL_CA_BUNDLE`` is unset, as in a pod: the CA goes there."""


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory, real_node: str) -> Iterator[ObjectStore]:
    """The stand-in on the node's bridge; fails (never skips) when it cannot start."""
    server = ObjectStore(
        tmp_path_factory.mktemp("gcs"), BUCKET, OnHost(NAMES.bridge, GOOGLE_APIS_IP, METADATA_IP)
    )
    try:
        server.start()
    except (RuntimeError, OSError, subprocess.CalledProcessError) as err:
        pytest.fail(f"the object store stand-in on the node: {err}")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def trusting_image(
    built: str,  # noqa: F811 - the fixture
    store: ObjectStore,
    tmp_path_factory: pytest.TempPathFactory,
) -> str:
    """The trainer image with the stand-in's CA in its trust store, in the node's containerd."""
    context = tmp_path_factory.mktemp("trusting-image")
    shutil.copy(store.ca, context / "object-store-ca.crt")
    (context / "Dockerfile").write_text(TRUST_CA.format(base=f"{REPOSITORY}:e2e"))
    result = docker("build", "-q", "-t", f"{REPOSITORY}:e2e-gcs", str(context), timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    image_id = result.stdout.strip()
    reference = f"{REPOSITORY}:gcs-{image_id.removeprefix('sha256:')[:12]}"
    seconds = realnode.load_image(image_id, reference)
    if seconds is not None:
        log_figure("docker save | ctr import of the trainer image with the CA", seconds)
    return reference


@pytest.fixture(scope="module")
def project(new_project: Callable[..., Project], trusting_image: str) -> Iterator[Project]:
    settings = {
        "checkpointUri": f"gs://{BUCKET}/{ROOT_PREFIX}",
        "egressHttpsCidrs": [PRIVATE_GOOGLE_ACCESS],
        "metadataEgress": [f"{METADATA_IP}/32:80"],
        "runId": RUN_ID,
        "replicas": 2,
        "autoscalingEnabled": False,
        "epochs": EPOCHS,
        "stepsPerEpoch": STEPS_PER_EPOCH,
        "checkpointEvery": CHECKPOINT_EVERY,
    }
    stack = realnode.real_stack(new_project, "gcs", NS, trusting_image, settings)
    yield project_with_program(stack)


def run_prefix(project: Project) -> str:
    """The run's directory in the bucket: ``checkpointUri``/project/stack/run id."""
    return f"{ROOT_PREFIX}/{PROJECT}/{project.stack.name}/{RUN_ID}/"


def listing(objects: dict[str, tuple[int, str]]) -> str:
    return "\n".join(f"  {size:>9}  gs://{BUCKET}/{name}" for name, (size, _) in objects.items())


@pytest.fixture(scope="module")
def done(project: Project, kube: Kube, store: ObjectStore) -> dict[str, tuple[int, str]]:
    """``pulumi up``, then the run's objects once its ``DONE`` marker is in the bucket."""
    prefix = run_prefix(project)
    started = time.monotonic()
    project.up()

    def finished() -> dict[str, tuple[int, str]] | None:
        objects = store.objects(prefix)
        return objects if prefix + contract.DONE_MARKER in objects else None

    objects = kube.wait_for(f"gs://{BUCKET}/{prefix}{contract.DONE_MARKER}", finished, 600, 3)
    log_figure("gs:// stack: pulumi up to DONE in the bucket", time.monotonic() - started)
    return objects


def test_two_workers_train_to_done_with_every_record_in_the_bucket(
    done: dict[str, tuple[int, str]], project: Project, kube: Kube, store: ObjectStore
) -> None:
    prefix = run_prefix(project)
    print(f"gs://{BUCKET}/{prefix} done:\n{listing(done)}")
    for name in (contract.DONE_MARKER, MANIFEST_FILE, SUMMARY_FILE,
                 f"{CHECKPOINTS_SUBDIR}/ckpt-{FINAL_STEP}.index"):  # fmt: skip
        assert prefix + name in done, f"{name} not in gs://{BUCKET}/{prefix}:\n{listing(done)}"
    summary = json.loads(
        store.curl(f"https://storage.googleapis.com/{BUCKET}/{prefix}{SUMMARY_FILE}")
    )
    assert summary.get("final_step") == FINAL_STEP, summary
    print(f"requests the bucket's front passed on (each with the metadata server's token): "
          f"{requests_so_far(store.dir)}")  # fmt: skip
    claims = kube.items("persistentvolumeclaim", NS)
    assert claims == [], f"a gs:// stack needs no claim: {[c['metadata']['name'] for c in claims]}"
    sts = kube.get("statefulset", "tfd-worker", NS)
    assert sts is not None, f"statefulset {NS}/tfd-worker missing"
    pod = sts["spec"]["template"]["spec"]
    env = {e["name"] for c in pod["containers"] for e in c.get("env", [])}
    assert "GOOGLE_APPLICATION_CREDENTIALS" not in env, f"a key file in {NS}/tfd-worker: {env}"
    secrets = [v for v in pod.get("volumes", []) if "secret" in v]
    assert secrets == [], f"statefulset {NS}/tfd-worker mounts secrets: {secrets}"


def test_tfd_runs_lists_the_run_from_its_records_in_the_bucket(
    done: dict[str, tuple[int, str]], project: Project
) -> None:
    result = tfd(project, "runs", "--json", timeout=300)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    runs = {r["run_id"]: r for r in json.loads(result.stdout)["runs"]}
    assert RUN_ID in runs, f"tfd runs of the gs:// stack: {sorted(runs)}"
    record = runs[RUN_ID]
    assert record["state"] == "done", record
    human = tfd(project, "runs")
    assert human.returncode == 0, human.stderr
    print(f"[tfd output] tfd runs:\n{human.stdout}")


def test_only_the_stacks_pods_reach_the_bucket_and_destroy_leaves_it(
    done: dict[str, tuple[int, str]], project: Project, kube: Kube, store: ObjectStore
) -> None:
    realnode.apply(kube, realnode.busybox_pod("intruder", NS, "sleep 3600"))
    realnode.running(kube, "intruder", NS)
    code, out = realnode.connect(kube, "intruder", NS, GOOGLE_APIS_IP, 443)
    assert code != 0, f"a pod outside the stack reached {GOOGLE_APIS_IP}:443: {out}"
    print(f"a pod outside the stack, to the bucket's address: {out.strip() or code}")
    kube.run("delete", "pod", "intruder", "-n", NS, "--grace-period=0", "--wait=false")
    project.destroy()
    after = store.objects(run_prefix(project))
    assert after == done, f"pulumi destroy changed the bucket:\n{listing(after)}"
