"""A worker process's start paths that train nothing, as real ``python -m trainer`` processes
against a fake Kubernetes API: a finished run scales to zero (or fails clearly on 403), a pod of
an outdated revision deletes itself, a surplus pod waits, scale-to-zero without API access is
refused. Each waiting process is then stopped with SIGTERM, as the kubelet would."""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.trainer.fake_api import FakeApi, Seen
from trainer import contract, done_marker, lifecycle
from trainer.errors import (
    EXIT_API,
    EXIT_CONTRACT,
    EXIT_OK,
    EXIT_RESTART,
    EXIT_RUN_CONFLICT,
    ApiUnansweredError,
    RestartRequested,
)
from trainer.lease import LEASE_FILE, LeaseRecord
from trainer.local_cluster import parse_events, worker_envs
from trainer.logs import Log
from trainer.signals import StopSignal

STS = "/apis/apps/v1/namespaces/local/statefulsets/tfd-worker"


def _finished(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    # What the default flags (3 epochs) ask for: finished.
    done_marker.write_done(str(root), done_marker.DoneRecord(192, 3, 64, 64, root.name))


def _finished_worker(
    api: FakeApi, tmp_path: Path, workers: int = 1, index: int = 0
) -> dict[str, str]:
    """The environment of worker ``index`` of the finished run ``run-1``, with API access."""
    root = tmp_path / "run-1"
    _finished(root)
    return worker_envs(workers, str(root))[index] | api.env(tmp_path / "token")


def _start(env: dict[str, str], *flags: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "trainer", *flags],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _until_api(api: FakeApi, method: str, timeout_s: float = 60, count: int = 1) -> None:
    deadline = time.time() + timeout_s
    while len(api.calls(method)) < count:
        assert time.time() < deadline, f"no {count} {method} within {timeout_s}s: {api.seen}"
        time.sleep(0.05)


def _terminate(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    time.sleep(0.3)  # the wait comes right after the call
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    return proc.returncode, out, err


def test_scale_to_zero_needs_api_access(tmp_path: Path):
    env = worker_envs(1, str(tmp_path / "run"))[0]
    proc = subprocess.run(
        [sys.executable, "-m", "trainer", "--on-done", "scale-to-zero"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == EXIT_CONTRACT, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        "trainer: error: --on-done scale-to-zero: needs Kubernetes API access (TFD_API_URL, or "
        "TFD_REPLICAS_SOURCE=api); got neither; use --on-done exit or idle without a cluster"
    )


@pytest.mark.parametrize("index", [0, 1], ids=["chief", "worker-1"])
def test_finished_run_scales_to_zero_then_waits(api: FakeApi, tmp_path: Path, index: int):
    """Any worker that starts and finds the run finished scales the StatefulSet to zero."""
    env = _finished_worker(api, tmp_path, workers=2, index=index)
    proc = _start(env, "--on-done", "scale-to-zero")
    _until_api(api, "PATCH")
    code, out, err = _terminate(proc)
    assert code == EXIT_OK, err[-1000:]
    (patch,) = api.calls("PATCH")
    assert (patch.path, patch.body) == (f"{STS}/scale", {"spec": {"replicas": 0}})
    assert patch.headers["Content-Type"] == "application/merge-patch+json"
    assert [e["event"] for e in parse_events(out.splitlines())] == [
        "done",
        "scaled_to_zero",
        "idle",
    ], out
    assert not api.calls("DELETE")


def test_failed_scale_to_zero_exits_7_with_one_line(api: FakeApi, tmp_path: Path):
    api.status["PATCH"] = 403
    env = _finished_worker(api, tmp_path)
    proc = _start(env, "--on-done", "scale-to-zero")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_API, err[-1000:]
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == (
        f"trainer: error: PATCH {api.url}{STS}/scale: HTTP 403 Forbidden: PATCH is forbidden here"
    )


@pytest.mark.parametrize("on_done", ["idle", "exit"])
def test_other_modes_do_not_scale(api: FakeApi, tmp_path: Path, on_done: str):
    env = _finished_worker(api, tmp_path)
    proc = _start(env, "--on-done", on_done)
    if on_done == "idle":
        deadline = time.time() + 60
        while proc.stdout is not None and '"event": "idle"' not in proc.stdout.readline():
            assert time.time() < deadline
        code, _, err = _terminate(proc)
    else:
        _, err = proc.communicate(timeout=60)
        code = proc.returncode
    assert code == EXIT_OK, err[-1000:]
    assert [s.method for s in api.seen] == ["GET"], "only the start-up StatefulSet read"


def test_outdated_revision_deletes_its_own_pod(api: FakeApi, tmp_path: Path):
    api.update_revision = "rev-b"
    env = worker_envs(2, str(tmp_path / "run-1"))[1] | api.env(tmp_path / "token")
    env[contract.ENV_POD_REVISION] = "rev-a"
    proc = _start(env, "--on-done", "scale-to-zero")
    _until_api(api, "DELETE")
    code, out, err = _terminate(proc)
    assert code == EXIT_RESTART, err[-1000:]
    (delete,) = api.calls("DELETE")
    assert delete.path == "/api/v1/namespaces/local/pods/tfd-worker-1"
    events = [e["event"] for e in parse_events(out.splitlines())]
    assert events == ["rollout", "pod_deleted"], out
    assert not (tmp_path / "run-1" / "checkpoints").exists(), "trained before leaving"


def test_failed_delete_exits_7(api: FakeApi, tmp_path: Path):
    api.update_revision = "rev-b"
    api.status["DELETE"] = 403
    env = worker_envs(1, str(tmp_path / "run-1"))[0] | api.env(tmp_path / "token")
    env[contract.ENV_POD_REVISION] = "rev-a"
    proc = _start(env)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_API, err[-1000:]
    assert err.strip().splitlines()[-1] == (
        f"trainer: error: DELETE {api.url}/api/v1/namespaces/local/pods/tfd-worker-0: "
        "HTTP 403 Forbidden: DELETE is forbidden here"
    )


def test_surplus_pod_waits_for_termination(api: FakeApi, tmp_path: Path):
    """Scaled from 2 to 1: the controller is removing tfd-worker-1; it must not fail."""
    env = worker_envs(2, str(tmp_path / "run-1"))[1] | api.env(tmp_path / "token")
    env[contract.ENV_REPLICAS_SOURCE] = "api"
    proc = _start(env)
    deadline = time.time() + 60
    while proc.stdout is not None and '"event": "surplus"' not in proc.stdout.readline():
        assert time.time() < deadline and proc.poll() is None, proc.stderr.read()  # type: ignore[union-attr]
    code, _, err = _terminate(proc)
    assert code == EXIT_OK, err[-1000:]
    assert "error" not in err


def _first_event(proc: subprocess.Popen, event: str, refused: str = "") -> str:
    """The first line of ``proc`` with ``event`` (within 60 s); none before it may be
    ``refused``."""
    deadline = time.time() + 60
    line = ""
    while proc.stdout is not None and f'"event": "{event}"' not in line:
        assert time.time() < deadline and proc.poll() is None, proc.stderr.read()  # type: ignore[union-attr]
        line = proc.stdout.readline()
        assert not refused or f'"event": "{refused}"' not in line, line
    return line


def test_a_pod_of_a_smaller_template_waits_while_the_statefulset_still_counts_it(
    api: FakeApi, tmp_path: Path
):
    """3 -> 2 workers in a new template: the count is patched after the rollout, so the
    recreated tfd-worker-2 reads TFD_REPLICAS=2 while the StatefulSet counts 3. It must wait to
    be removed (Ready, training nothing), not fail its ordinal check: a crash-looping pod would
    hold the rollout, and with it the new count, forever."""
    api.replicas = 3
    env = worker_envs(3, str(tmp_path / "run-1"))[2] | api.env(tmp_path / "token")
    env[contract.ENV_REPLICAS] = "2"
    proc = _start(env)
    line = _first_event(proc, "surplus")
    assert "ordinal 2 >= the template's TFD_REPLICAS 2" in line, line
    code, _, err = _terminate(proc)
    assert code == EXIT_OK, err[-1000:]
    assert not (tmp_path / "run-1" / "checkpoints").exists(), "a surplus pod trained"


def test_under_an_autoscaler_the_live_count_rules_not_the_templates(api: FakeApi, tmp_path: Path):
    """HPA 2 -> 3: the new tfd-worker-2 carries the stack's TFD_REPLICAS=2, but its count comes
    from the API (3): it joins, it is no surplus."""
    api.replicas = 3
    env = worker_envs(3, str(tmp_path / "run-1"))[2] | api.env(tmp_path / "token")
    env[contract.ENV_REPLICAS] = "2"
    env[contract.ENV_REPLICAS_SOURCE] = "api"
    proc = _start(env)
    line = _first_event(proc, "forming", refused="surplus")
    assert '"workers": 3' in line, line
    _terminate(proc)


def test_supervisor_restart_count_is_exported(api: FakeApi, tmp_path: Path):
    """TFD_SUPERVISOR_RESTARTS and the run id reach /metrics of a (finished, idle) worker."""
    import urllib.request

    root = tmp_path / "run-9"
    _finished(root)
    env = worker_envs(1, str(root))[0] | {
        contract.ENV_SUPERVISOR_RESTARTS: "3",
        contract.ENV_POD_REVISION: "rev-a",
    }
    proc = _start(env, "--on-done", "idle")
    url = f"http://127.0.0.1:{env[contract.ENV_METRICS_PORT]}{contract.METRICS_PATH}"
    deadline = time.time() + 60
    text = ""
    while contract.METRIC_SUPERVISOR_RESTARTS not in text:
        assert time.time() < deadline and proc.poll() is None, "no /metrics"
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                text = resp.read().decode()
        except OSError:
            time.sleep(0.1)
    _terminate(proc)
    assert f"{contract.METRIC_SUPERVISOR_RESTARTS} 3.0" in text, text
    assert f'{contract.METRIC_RUN_INFO}{{revision="rev-a",run_id="run-9"}} 1.0' in text, text
    assert os.environ.get(contract.ENV_SUPERVISOR_RESTARTS) is None


def _probe(port: str, path: str) -> tuple[int, str]:
    """Status and body of ``GET 127.0.0.1:<port><path>``; an HTTP error status is an answer."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_probes_answer_while_the_statefulset_read_waits(api: FakeApi, tmp_path: Path):
    """A supervisor's new child answers its probes before the API (or DNS) does: a slow API
    at start-up must not look like a dead container to the liveness probe."""
    import threading

    held, release = threading.Event(), threading.Event()

    def hold(seen: object) -> None:
        held.set()
        release.wait(60)

    api.on_request = hold
    env = worker_envs(2, str(tmp_path / "run-1"))[1] | api.env(tmp_path / "token")
    env[contract.ENV_REPLICAS_SOURCE] = "api"
    api.replicas = 1  # tfd-worker-1 is surplus once the read is answered
    proc = _start(env)
    try:
        assert held.wait(60), "no StatefulSet read"
        port = env[contract.ENV_METRICS_PORT]
        deadline = time.time() + 30
        while True:
            try:
                liveness = _probe(port, contract.LIVENESS_PATH)
                break
            except OSError as err:  # refused: the server is not up yet
                assert time.time() < deadline, f"no probe server while the read waits: {err}"
                time.sleep(0.1)
        assert liveness == (200, "ok\n")
        assert _probe(port, contract.READINESS_PATH)[0] == 503
        metrics = _probe(port, contract.METRICS_PATH)[1]
        assert f"{contract.METRIC_WORLD_SIZE} 0.0" in metrics, metrics
        assert f"{contract.METRIC_TASK_INDEX} -1.0" in metrics, metrics
        release.set()
        deadline = time.time() + 60
        while proc.stdout is not None and '"event": "surplus"' not in proc.stdout.readline():
            assert time.time() < deadline and proc.poll() is None, "no surplus event"
        metrics = _probe(port, contract.METRICS_PATH)[1]
        assert f"{contract.METRIC_WORLD_SIZE} 1.0" in metrics, metrics
        assert f"{contract.METRIC_TASK_INDEX} 1.0" in metrics, metrics
        assert _probe(port, contract.READINESS_PATH)[0] == 200
    finally:
        release.set()
        code, _, err = _terminate(proc)
    assert code == EXIT_OK, err[-1000:]


@pytest.mark.parametrize(
    ("delay", "terminate", "code", "events"),
    [
        ("4", False, EXIT_OK, ["waiting", "done"]),  # waited, then goes on (here: finished)
        ("10", True, EXIT_RESTART, ["waiting"]),  # the pod ends while it waits
    ],
    ids=["waits-then-goes-on", "sigterm-while-waiting"],
)
def test_a_child_told_to_wait_serves_its_probes_meanwhile(
    api: FakeApi, tmp_path: Path, delay: str, terminate: bool, code: int, events: list[str]
):
    """After exit 77 the supervisor's next child waits TFD_START_DELAY_SECONDS before it reads
    the StatefulSet and forms the cluster, answering its probes all the while."""
    env = _finished_worker(api, tmp_path) | {contract.ENV_START_DELAY_SECONDS: delay}
    proc = _start(env, "--on-done", "exit")
    assert proc.stdout is not None
    first = parse_events([proc.stdout.readline()])
    assert first and first[0]["event"] == "waiting", first
    assert first[0]["seconds"] == float(delay)
    assert not api.seen, "read the StatefulSet before waiting"
    assert _probe(env[contract.ENV_METRICS_PORT], contract.LIVENESS_PATH) == (200, "ok\n")
    if terminate:
        proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err[-1000:]
    seen = [e["event"] for e in first + parse_events(out.splitlines())]
    # A "warning" would be a StatefulSet read that timed out on a stalled machine: not the point.
    assert [e for e in seen if e != "warning"] == events, out
    if terminate:
        last = err.strip().splitlines()[-1]
        assert last == "trainer: error: stopped (SIGTERM) while waiting to be admitted", err
        assert not api.seen


CUT = "cut"
"""An answer of 200 whose body is cut short (``http.client.IncompleteRead`` in the trainer)."""


def _answer_in_order(api: FakeApi, method: str, answers: list[int | str]) -> list[int | str]:
    """The fake answers ``method`` with ``answers`` in order (the last one from then on): an
    HTTP status, or :data:`CUT`. Returns the list of what was served, filled as it goes."""
    served: list[int | str] = []

    def in_order(seen: Seen) -> None:
        if seen.method != method:
            return
        answer = answers[min(len(served), len(answers) - 1)]
        api.status[method] = 200 if answer == CUT else int(answer)
        (api.cut_short.add if answer == CUT else api.cut_short.discard)(method)
        served.append(answer)

    api.on_request = in_order
    return served


@pytest.mark.parametrize(
    ("answers", "code"),
    [
        ([503, 503, 200], EXIT_OK),  # the API comes back: the worker goes on (here: surplus)
        ([CUT, CUT, 200], EXIT_OK),  # answers cut short on the wire, as a 503
        ([403], EXIT_CONTRACT),  # a refusal is not worth another try
    ],
    ids=["503-503-answer", "cut-cut-answer", "403-at-once"],
)
def test_start_up_read_of_the_world_size_tries_again_while_the_api_is_away(
    api: FakeApi, tmp_path: Path, answers: list[int | str], code: int
):
    served = _answer_in_order(api, "GET", answers)
    env = worker_envs(2, str(tmp_path / "run-1"))[1] | api.env(tmp_path / "token")
    env[contract.ENV_REPLICAS_SOURCE] = "api"
    proc = _start(env)
    lines: list[str] = []
    if code == EXIT_OK:
        deadline = time.time() + 60
        while proc.stdout is not None and '"event": "surplus"' not in (lines or [""])[-1]:
            assert time.time() < deadline and proc.poll() is None, "no surplus event"
            lines.append(proc.stdout.readline())
        returncode, out, err = _terminate(proc)
    else:
        out, err = proc.communicate(timeout=60)
        returncode = proc.returncode
    assert returncode == code, err[-1000:]
    # As answered. A request the trainer gave up on (its 5 s timeout, on a stalled machine)
    # still takes its answer here and adds a retry, hence the prefix rule.
    assert served[: len(answers) - 1] == answers[:-1] and served[-1] == answers[-1], served
    logged = parse_events([*lines, *out.splitlines()], "warning")
    assert len(logged) == len(served) - 1, lines
    for n, event in enumerate(logged):
        prefix = f"StatefulSet read at start failed; next try in {2**n} s: GET {api.url}{STS}: "
        assert event["message"].startswith(prefix), event
        assert any(why in event["message"] for why in ("HTTP 503", "cut short", "timed out")), event
    if code != EXIT_OK:
        last = err.strip().splitlines()[-1]
        assert last.startswith(f"trainer: error: GET {api.url}{STS}: HTTP 403"), err


def test_scale_to_zero_tries_again_without_an_answer(api: FakeApi, tmp_path: Path):
    """An answer cut short and a 503 are tried again (1 s, 2 s) before the scale succeeds."""
    served = _answer_in_order(api, "PATCH", [CUT, 503, 200])
    proc = _start(_finished_worker(api, tmp_path), "--on-done", "scale-to-zero")
    _until_api(api, "PATCH", count=3)
    code, out, err = _terminate(proc)
    assert code == EXIT_OK, err[-1000:]
    assert served == [CUT, 503, 200], served
    events = parse_events(out.splitlines())
    assert [e["event"] for e in events] == ["done", "warning", "warning", "scaled_to_zero", "idle"]
    first, second = (e["message"] for e in events[1:3])
    prefix = f"scale to zero failed; next try in 1 s: PATCH {api.url}{STS}/scale: "
    assert first.startswith(prefix + "answer cut short"), first
    assert second.startswith("scale to zero failed; next try in 2 s: PATCH "), second
    assert "HTTP 503" in second, second


def test_deleting_its_own_pod_tries_again_without_an_answer(api: FakeApi, tmp_path: Path):
    api.update_revision = "rev-b"
    served = _answer_in_order(api, "DELETE", [CUT, 200])
    env = worker_envs(1, str(tmp_path / "run-1"))[0] | api.env(tmp_path / "token")
    env[contract.ENV_POD_REVISION] = "rev-a"
    proc = _start(env)
    _until_api(api, "DELETE", count=2)
    code, out, err = _terminate(proc)
    assert code == EXIT_RESTART, err[-1000:]
    assert served == [CUT, 200], served
    events = parse_events(out.splitlines())
    assert [e["event"] for e in events] == ["rollout", "warning", "pod_deleted"], out
    assert events[1]["message"].startswith("deletion of this pod failed; next try in 1 s: DELETE ")


def test_retries_end_after_the_budget():
    """Out of tries, the last error (exit 7 here). The pauses pass on a clock of the test's, so
    a loaded machine's late wake-ups do not change the count."""
    now = [0.0]
    calls: list[float] = []
    stop = StopSignal()

    def pause(seconds: float) -> bool:
        now[0] += seconds
        return False

    def unanswered() -> None:
        calls.append(now[0])
        raise ApiUnansweredError("PATCH http://api/scale: HTTP 503 Service Unavailable")

    stop.event.wait = pause  # type: ignore[method-assign]
    stream = io.StringIO()
    with pytest.raises(ApiUnansweredError) as info:
        lifecycle._retrying(unanswered, "scale to zero", ApiUnansweredError, stop, Log(0, stream),
                            budget_s=3.5, clock=lambda: now[0])  # fmt: skip
    # Tries at 0, 1 and 3 s; the next pause (4 s) would pass the budget.
    assert calls == [0.0, 1.0, 3.0], calls
    assert info.value.exit_code == EXIT_API
    warnings = [json.loads(line)["message"] for line in stream.getvalue().splitlines()]
    assert len(warnings) == 2, warnings


def test_sigterm_while_a_retry_waits_ends_the_tries_at_once(monkeypatch: pytest.MonkeyPatch):
    """SIGTERM 0.2 s into a 30 s pause: exit 76 then, no second try (a wait that ignored the
    signal would try again after 30 s; the bound leaves a loaded machine 15 s)."""
    monkeypatch.setattr(lifecycle, "waiting_pause", lambda first, tries: 30.0)
    calls: list[float] = []
    stop = StopSignal()

    def unanswered() -> None:
        calls.append(time.monotonic())
        threading.Timer(0.2, stop.request, args=("SIGTERM",)).start()
        raise ApiUnansweredError("PATCH http://api/scale: HTTP 503 Service Unavailable")

    stream = io.StringIO()
    with pytest.raises(RestartRequested) as info:
        lifecycle._retrying(unanswered, "scale to zero", ApiUnansweredError, stop, Log(0, stream),
                            budget_s=600)  # fmt: skip
    assert len(calls) == 1, calls
    assert time.monotonic() - calls[0] < 15, "waited the whole pause despite SIGTERM"
    assert info.value.exit_code == EXIT_RESTART
    assert str(info.value).startswith("stopped (SIGTERM) while the scale to zero was failing")
    assert len(stream.getvalue().splitlines()) == 1, stream.getvalue()


def test_failed_read_at_start_is_a_warning_without_replicas_from_the_api(
    api: FakeApi, tmp_path: Path
):
    """With TFD_REPLICAS_SOURCE=env a refused start-up read (403: not worth another try) is a
    warning that says the chief's lease holder goes without the StatefulSet's uid."""
    api.status["GET"] = 403
    env = _finished_worker(api, tmp_path)
    proc = _start(env, "--on-done", "exit")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == EXIT_OK, err[-1000:]
    warning = parse_events(out.splitlines(), "warning")[0]["message"]
    assert warning.startswith(f"StatefulSet check at start failed: GET {api.url}{STS}: HTTP 403")
    holder = f"local/tfd-worker-0@{socket.gethostname()}"
    assert warning.endswith(f"the chief's lease holder is {holder}, without the StatefulSet's uid")


@pytest.mark.parametrize("first", [503, CUT], ids=["503", "cut-short"])
def test_the_chief_keeps_its_uid_when_the_first_read_gets_no_answer(
    api: FakeApi, tmp_path: Path, first: int | str
):
    """Without TFD_REPLICAS_SOURCE=api too, a start-up read without an answer (a 5 s timeout on
    a loaded machine, a 503) is tried again: the holder keeps the uid, and is refused here as
    another deployment's chief. (A single read dropped the token: ``...@host`` without ``#``.)"""
    served = _answer_in_order(api, "GET", [first, 200])
    root = tmp_path / "run-1"
    root.mkdir()
    other = f"local/tfd-worker-0@{socket.gethostname()}#uid-cluster-a"
    (root / LEASE_FILE).write_text(LeaseRecord(other, time.time() + 600, time.time()).to_text())
    api.uid = "uid-cluster-b"
    env = worker_envs(1, str(root))[0] | api.env(tmp_path / "token")
    proc = _start(env, "--on-done", "exit")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == EXIT_RUN_CONFLICT, err[-1000:]
    assert served[0] == first and served[-1] == 200, served
    last = err.strip().splitlines()[-1]
    assert f"this chief is local/tfd-worker-0@{socket.gethostname()}#uid-cluster-b" in last, last
    warning = parse_events(out.splitlines(), "warning")[0]["message"]
    assert warning.startswith("StatefulSet read at start failed; next try in 1 s: GET "), warning


def test_the_chief_holds_its_lease_as_its_statefulsets_uid(api: FakeApi, tmp_path: Path):
    """One stack on two clusters sharing a bucket: the same pod name, another StatefulSet. The
    chief puts the uid it read from its StatefulSet at start into its holder, so it is another
    holder than the other cluster's live chief: refused, exit 9, nothing written. (Without the
    uid both chiefs were ``local/tfd-worker-0@<host>``, one holder, and it took the lease.)"""
    root = tmp_path / "run-1"
    root.mkdir()
    other = f"local/tfd-worker-0@{socket.gethostname()}#uid-cluster-a"
    lease = LeaseRecord(other, time.time() + 600, time.time()).to_text()
    (root / LEASE_FILE).write_text(lease)
    api.uid = "uid-cluster-b"
    env = worker_envs(1, str(root))[0] | api.env(tmp_path / "token")
    proc = _start(env, "--on-done", "exit")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == EXIT_RUN_CONFLICT, err[-1000:]
    last = err.strip().splitlines()[-1]
    assert f"lease of {other} expires at" in last, last
    assert f"this chief is local/tfd-worker-0@{socket.gethostname()}#uid-cluster-b" in last, last
    assert [p.name for p in root.iterdir()] == [LEASE_FILE], "a refused chief wrote"
    assert (root / LEASE_FILE).read_text() == lease
