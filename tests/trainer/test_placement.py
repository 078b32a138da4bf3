"""The wait for the peers before the cluster forms: bounded (exit 75), SIGTERM honoured at once
(exit 76), and the chief, the coordination service's leader, waits until each other worker
listens. No TensorFlow: this wait runs in Python, before TensorFlow's own."""

from __future__ import annotations

import io
import json
import socket
import threading
import time

import pytest

from trainer import contract, placement
from trainer.config import Config
from trainer.errors import (
    EXIT_CONTRACT,
    EXIT_PEER_LOST,
    EXIT_RESTART,
    GpuMissingError,
    PeerLostError,
    RestartRequested,
)
from trainer.logs import Log
from trainer.signals import StopSignal

UNRESOLVABLE = "tfd-no-such-peer.invalid:2222"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(spec: contract.ClusterSpec, stop: StopSignal, timeout_s: float) -> list[str]:
    stream = io.StringIO()
    try:
        placement.await_peers(spec, stop, Log(spec.task_index, stream), timeout_s)
    finally:
        messages = [json.loads(line)["message"] for line in stream.getvalue().splitlines()]
    return messages


@pytest.mark.parametrize("task_index", [0, 1], ids=["chief", "worker"])
def test_an_unresolvable_peer_ends_the_wait_with_exit_75(task_index: int):
    workers = ("127.0.0.1:1", UNRESOLVABLE) if task_index == 0 else (UNRESOLVABLE, "127.0.0.1:1")
    spec = contract.ClusterSpec(task_index, workers)
    started = time.monotonic()
    with pytest.raises(PeerLostError) as info:
        _wait(spec, StopSignal(), timeout_s=2)
    # At the timeout, not long after it (a loaded machine can take seconds more).
    assert 2 <= time.monotonic() - started < 30
    assert info.value.exit_code == EXIT_PEER_LOST
    assert str(info.value).startswith(
        f"cannot form the cluster within 2 s: {UNRESOLVABLE} does not resolve ("
    ), str(info.value)


def test_sigterm_while_waiting_is_exit_76_at_once():
    stop = StopSignal()
    spec = contract.ClusterSpec(0, ("127.0.0.1:1", UNRESOLVABLE))
    threading.Timer(0.5, stop.request, args=("SIGTERM",)).start()
    started = time.monotonic()
    with pytest.raises(RestartRequested) as info:
        _wait(spec, stop, timeout_s=60)
    # Well before the 60 s timeout, with room for a loaded machine.
    assert time.monotonic() - started < 30, "SIGTERM waited for the timeout"
    assert info.value.exit_code == EXIT_RESTART
    assert str(info.value).startswith(
        f"stopped (SIGTERM) while the cluster was forming: {UNRESOLVABLE} does not resolve"
    )


def test_the_chief_waits_until_each_worker_listens():
    """Worker 1's port opens after 1.5 s (it starts forming): the chief goes on then, with one
    warning; a worker waits only for names, since the chief opens its port last."""
    port = _free_port()
    peer = f"127.0.0.1:{port}"
    assert _wait(contract.ClusterSpec(1, (peer, "127.0.0.1:1")), StopSignal(), 5) == []

    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)

    def listen() -> None:
        server.bind(("127.0.0.1", port))
        server.listen()

    timer = threading.Timer(1.5, listen)
    timer.start()
    try:
        started = time.monotonic()
        messages = _wait(contract.ClusterSpec(0, ("127.0.0.1:1", peer)), StopSignal(), 20)
        # Before the 20 s timeout (which would raise): when the port opened.
        assert 1.5 <= time.monotonic() - started < 20
    finally:
        timer.join()
        server.close()
    assert len(messages) == 1, messages
    assert messages[0].startswith(
        f"cluster forming: waiting up to 20 s for {peer}: does not accept connections ("
    ), messages


def test_the_looks_for_missing_peers_back_off_from_50_ms_to_a_second():
    """A restart's peers come within a second: the first looks come soon (a fixed second was
    paid whole by every restart), then back off to one a second for a large cluster."""
    stop = StopSignal()
    pauses: list[float] = []

    def wait(pause: float) -> bool:
        pauses.append(pause)
        time.sleep(pause)
        return False

    stop.event.wait = wait  # type: ignore[method-assign]
    with pytest.raises(PeerLostError):
        _wait(contract.ClusterSpec(0, ("127.0.0.1:1", UNRESOLVABLE)), stop, timeout_s=3)
    first, longest = placement.FORM_POLL_S
    assert pauses[:5] == [first * 2**i for i in range(5)], pauses
    assert max(pauses) == longest and pauses[-1] == longest, pauses


@pytest.mark.parametrize(
    ("given", "seen", "fallback", "outcome"),
    [
        (0, 0, False, None),  # a CPU pod
        (1, 1, False, None),
        (2, 4, False, None),  # more visible than given (a node without device isolation)
        (1, 0, False, "TFD_GPUS=1: the pod was given 1 GPU(s) but TensorFlow sees 0"),
        (2, 1, False, "TFD_GPUS=2: the pod was given 2 GPU(s) but TensorFlow sees 1"),
        (1, 0, True, "cpu_fallback"),
    ],
)
def test_a_pod_given_gpus_that_tensorflow_cannot_see_stops_unless_told(
    given: int, seen: int, fallback: bool, outcome: str | None
):
    stream = io.StringIO()
    check = lambda: placement.check_gpus(  # noqa: E731
        Config(allow_cpu_fallback=fallback), given, seen, Log(0, stream)
    )
    if outcome is None or outcome == "cpu_fallback":
        check()
        events = [json.loads(line)["event"] for line in stream.getvalue().splitlines()]
        assert events == ([outcome] if outcome else []), (given, seen, fallback, events)
        return
    with pytest.raises(GpuMissingError) as caught:
        check()
    message = str(caught.value)
    assert message.startswith(outcome) and "\n" not in message, message
    assert "driver" in message and "--allow-cpu-fallback" in message, message
    assert caught.value.exit_code == EXIT_CONTRACT == 3
