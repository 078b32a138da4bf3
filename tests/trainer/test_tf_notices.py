"""TensorFlow's no-CUDA-driver start-up notices stay off the local launcher's terminal."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest

from trainer import local_cluster
from trainer.tf_notices import NO_GPU_NOTE, NoticeFilter

ABSL = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"
NO_DRIVER = (
    "I0000 00:00:1796298400.379933   29639 cudart_stub.cc:31] Could not find cuda drivers on "
    "your machine, GPU will not be used."
)
CUINIT = (
    "E0000 00:00:1796298403.912677   29639 cuda_platform.cc:52] failed call to cuInit: INTERNAL: "
    "CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)"
)
EVENT = '{"ts": 1.0, "event": "start", "worker": 0}'
OTHER_ERROR = "E0000 00:00:1.0 1 grpc_server.cc:9] port 2222 already in use"


@pytest.mark.parametrize(
    ("lines", "shown"),
    [
        ([ABSL, NO_DRIVER, ABSL, NO_DRIVER, CUINIT, EVENT], [EVENT]),
        # A cuInit failure on a machine whose driver TensorFlow found is a real problem: shown.
        ([CUINIT, EVENT], [CUINIT, EVENT]),
        ([NO_DRIVER, OTHER_ERROR, EVENT], [OTHER_ERROR, EVENT]),
    ],
)
def test_which_lines_are_shown(lines: list[str], shown: list[str]):
    notices = NoticeFilter()
    assert [line for line in lines if notices.shown(line)] == shown


def test_the_launcher_notes_the_cpu_once_and_keeps_every_line(tmp_path):
    out = io.StringIO()
    cluster = local_cluster.LocalCluster(2, str(tmp_path), out=out)
    workers = []
    for i in range(2):
        text = "\n".join([ABSL, NO_DRIVER, CUINIT, EVENT]) + "\n"
        proc = SimpleNamespace(stdout=io.StringIO(text), wait=lambda: 0)
        worker = local_cluster.WorkerProcess(i, proc, {})  # type: ignore[arg-type]
        cluster._pump(worker)
        workers.append(worker)
    printed = out.getvalue().splitlines()
    assert printed == [
        f"[launcher] {NO_GPU_NOTE}",
        f"[worker-0] {EVENT}",
        f"[worker-1] {EVENT}",
    ], printed
    assert all(w.lines == [ABSL, NO_DRIVER, CUINIT, EVENT] for w in workers)
