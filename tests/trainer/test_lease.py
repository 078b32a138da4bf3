"""The chief's lease (``trainer/lease.py``): who may take it, renewal, loss and release, on a
local directory (the same code path as the shared claim; no TensorFlow)."""

from __future__ import annotations

import errno
import io
import json
import os
import time
from pathlib import Path

import pytest

from trainer import contract, lease, storage
from trainer.config import Config
from trainer.errors import EXIT_CHECKPOINT, EXIT_RUN_CONFLICT, CheckpointError, RunConflictError
from trainer.lease import LEASE_FILE, Lease, LeaseRecord
from trainer.logs import Log
from trainer.manifest import MANIFEST_FILE, RunGuard

ME = "ml/tfd-worker-0@node-a"
OTHER = "ml/tfd-worker-0@node-b"
NOW = 1_800_000_000.0


class Clock:
    def __init__(self, now: float = NOW) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _lease(root: Path, holder: str = ME, clock: Clock | None = None, **kwargs) -> Lease:
    kwargs.setdefault("settle_seconds", 0.0)
    kwargs.setdefault("renew_seconds", 3600.0)  # no renewal thread activity unless asked for
    return Lease(str(root), holder, Log(0, io.StringIO()), clock=clock or Clock(), **kwargs)


def _put(root: Path, holder: str, expires_at: float) -> bytes:
    text = LeaseRecord(holder, expires_at, expires_at - lease.TTL_SECONDS).to_text()
    (root / LEASE_FILE).write_text(text)
    return text.encode()


def _events(held: Lease) -> list[dict]:
    return [json.loads(line) for line in held.log.stream.getvalue().splitlines()]


def test_expiry_is_three_renewal_periods():
    assert lease.TTL_SECONDS == 3 * lease.RENEW_SECONDS, "expiry must outlast two failed renewals"
    assert EXIT_RUN_CONFLICT == RunConflictError.exit_code == 9


@pytest.mark.parametrize(
    ("existing", "taken"),
    [
        (None, True),  # no lease: a new run
        ((OTHER, NOW + 20), False),  # another live chief
        ((OTHER, NOW - 0.001), True),  # another chief's lease has expired
        ((ME, NOW + 20), True),  # this chief's own lease: an in-place restart or recreated pod
        ((ME, NOW - 100), True),
    ],
)
def test_who_may_take_the_lease(tmp_path: Path, existing, taken):
    before = _put(tmp_path, *existing) if existing else None
    held = _lease(tmp_path)
    if not taken:
        with pytest.raises(RunConflictError) as caught:
            held.acquire()
        message = str(caught.value)
        assert "\n" not in message, message
        assert OTHER in message and "expires at 2027-01-15T08:00:20Z (in 20 s" in message, message
        assert (tmp_path / LEASE_FILE).read_bytes() == before, "a refused chief wrote the lease"
        assert sorted(p.name for p in tmp_path.iterdir()) == [LEASE_FILE], "a refused chief wrote"
        return
    held.acquire()
    try:
        record = held.read()
        assert record == LeaseRecord(ME, NOW + lease.TTL_SECONDS, NOW), record
        (event,) = [e for e in _events(held) if e["event"] == "lease"]
        if existing:
            assert event["previous_holder"] == existing[0], event
            assert event["previous_expired"] is (existing[1] <= NOW), event
    finally:
        held.release()
    assert not (tmp_path / LEASE_FILE).exists(), "release left the lease behind"


@pytest.mark.parametrize("holder", [ME, OTHER], ids=["same-holder", "other-holder"])
def test_a_restarts_release_marks_the_lease_expired_and_its_holder_takes_it_back_at_once(
    tmp_path: Path, holder: str
):
    """An exit for a restart (lost peer, SIGTERM, rollout, resize) starts the same holder
    again: the lease is left expired, so it takes it back without the settle wait; another
    holder finds it expired and takes it as a free one, after the settle."""
    clock = Clock()
    first = _lease(tmp_path, clock=clock)
    first.acquire()
    first.release(restarting=True)
    record = first.read()
    assert record == LeaseRecord(ME, NOW, NOW), f"a restart's release left {record}"
    clock.now = NOW + 1
    settled: list[float] = []
    again = _lease(tmp_path, holder, clock=clock, settle_seconds=0.5, sleep=settled.append)
    again.acquire()
    again.release()
    assert (settled == []) is (holder == ME), f"{holder} settled {settled}"


def test_the_same_holder_takes_its_lease_back_at_once(tmp_path: Path):
    _put(tmp_path, ME, NOW + 25)
    settled: list[float] = []
    # The settle wait is only for a free lease.
    held = _lease(tmp_path, settle_seconds=30.0, sleep=settled.append)
    held.acquire()
    held.release()
    assert settled == [], f"an own lease waited {settled}"


def test_two_chiefs_taking_a_free_lease_at_once_the_last_writer_wins(tmp_path: Path):
    """Both found the lease free; the other chief's write lands while this one settles (its
    settle wait is where the test writes, whatever the machine's load)."""

    def settle(seconds: float) -> None:
        assert seconds == 1.0
        assert first.read().holder == ME, "the first chief did not write its lease"
        _put(tmp_path, OTHER, NOW + 30)  # the second chief's write, later than the first's

    first = _lease(tmp_path, settle_seconds=1.0, sleep=settle)
    outcome: list[BaseException] = []
    try:
        first.acquire()
    except RunConflictError as err:
        outcome.append(err)
    assert len(outcome) == 1 and OTHER in str(outcome[0]), f"the first chief went on: {outcome}"
    assert first.read().holder == OTHER, "the refused chief overwrote the winner"


def test_renewal_rewrites_the_lease_and_a_thread_keeps_it_alive(tmp_path: Path):
    clock = Clock()
    held = _lease(tmp_path, clock=clock, renew_seconds=0.05)
    held.acquire()
    try:
        clock.now = NOW + 7
        deadline = time.monotonic() + 60
        while held.read().renewed_at != NOW + 7 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert held.read() == LeaseRecord(ME, NOW + 7 + lease.TTL_SECONDS, NOW + 7)
    finally:
        held.release()
    assert not (tmp_path / LEASE_FILE).exists()


def test_a_holder_that_lost_its_lease_stops_without_writing(tmp_path: Path):
    lost: list[str] = []
    held = _lease(tmp_path, on_lost=lost.append)
    held.acquire()
    taken = _put(tmp_path, OTHER, NOW + 30)  # it could not renew; another chief took over
    assert held.renew() is False
    (message,) = lost
    assert OTHER in message and "lease lost" in message and "\n" not in message, message
    assert (tmp_path / LEASE_FILE).read_bytes() == taken, "the old holder wrote again"
    with pytest.raises(RunConflictError, match="no longer held by this chief"):
        held.verify()
    held.release()
    assert (tmp_path / LEASE_FILE).read_bytes() == taken, "release deleted another's lease"


GARBAGE_LEASES = [
    "not json",
    '{"holder": "x", "expires_at": 1e999, "renewed_at": 1.0}',  # would never expire
    '{"holder": "x", "expires_at": NaN, "renewed_at": 1.0}',
    '{"holder": "x", "expires_at": 9e15, "renewed_at": 1.0}',  # held for 285 million years
    '{"holder": "x", "expires_at": 1.0, "renewed_at": 9.0}',  # expires before its renewal
]


@pytest.mark.parametrize("text", GARBAGE_LEASES)
def test_a_garbage_lease_is_refused_with_one_line(tmp_path: Path, text: str):
    (tmp_path / LEASE_FILE).write_text(text)
    with pytest.raises(RunConflictError) as caught:
        _lease(tmp_path).acquire()
    message = str(caught.value)
    assert message.startswith(f"{tmp_path / LEASE_FILE}: must be a JSON lease"), message
    assert "\n" not in message, message


POD = {contract.ENV_NAMESPACE: "ml", contract.ENV_POD_NAME: "tfd-worker-0"}
STS_UID = "0b6f3c1e-7a2d-4e59-9c1a-5d2f8e4b7a10"


@pytest.mark.parametrize(
    ("env", "deployment", "holder"),
    [
        (POD, "", "ml/tfd-worker-0@node-a"),  # no token: the names alone, as before tokens
        ({contract.ENV_POD_NAME: "tfd-worker-0"}, "", "tfd-worker-0@node-a"),
        (POD, STS_UID, f"ml/tfd-worker-0@node-a#{STS_UID}"),  # the StatefulSet's uid
        (POD | {contract.ENV_LAUNCH_ID: "5e1f"}, "", "ml/tfd-worker-0@node-a#5e1f"),  # local
        (POD | {contract.ENV_LAUNCH_ID: "5e1f"}, STS_UID, f"ml/tfd-worker-0@node-a#{STS_UID}"),
    ],
)
def test_holder_identity_is_stable_across_restarts_of_one_pod(
    monkeypatch, env: dict[str, str], deployment: str, holder: str
):
    monkeypatch.setattr(lease.socket, "gethostname", lambda: "node-a")
    assert lease.holder_identity(env, deployment) == holder
    assert lease.holder_identity(dict(env), deployment) == holder, "not stable across restarts"


@pytest.mark.parametrize(
    ("recorded", "mine", "taken"),
    [
        # One stack on two clusters sharing a bucket (another StatefulSet uid), or two
        # `trainer.local --run-id X` launches on one host (another launch id): same pod name.
        ({"deployment": "uid-cluster-a"}, {"deployment": "uid-cluster-b"}, False),
        ({contract.ENV_LAUNCH_ID: "launch-1"}, {contract.ENV_LAUNCH_ID: "launch-2"}, False),
        ({}, {"deployment": "uid-cluster-b"}, False),  # a holder without a token is another
        # The same deployment: an in-place restart or the pod its StatefulSet recreated.
        ({"deployment": "uid-cluster-a"}, {"deployment": "uid-cluster-a"}, True),
        ({contract.ENV_LAUNCH_ID: "launch-1"}, {contract.ENV_LAUNCH_ID: "launch-1"}, True),
    ],
)
def test_the_same_pod_name_of_another_deployment_is_refused(
    tmp_path: Path, monkeypatch, recorded: dict[str, str], mine: dict[str, str], taken: bool
):
    monkeypatch.setattr(lease.socket, "gethostname", lambda: "tfd-worker-0")

    def holder(token: dict[str, str]) -> str:
        env = POD | {k: v for k, v in token.items() if k != "deployment"}
        return lease.holder_identity(env, token.get("deployment", ""))

    before = _put(tmp_path, holder(recorded), NOW + 25)  # live: 25 s left
    settled: list[float] = []
    held = _lease(tmp_path, holder(mine), settle_seconds=30.0, sleep=settled.append)
    if not taken:
        with pytest.raises(RunConflictError) as caught:
            held.acquire()
        assert caught.value.exit_code == EXIT_RUN_CONFLICT
        message = str(caught.value)
        assert f"lease of {holder(recorded)} expires at" in message, message
        assert f"this chief is {holder(mine)}" in message and "\n" not in message, message
        assert (tmp_path / LEASE_FILE).read_bytes() == before, "a refused chief wrote the lease"
        return
    held.acquire()
    try:
        assert settled == [], f"the same deployment waited {settled} to take its lease back"
        assert held.read().holder == holder(mine)
    finally:
        held.release()


class _FullVolume:
    """A text file whose writes fail as on a full volume (ENOSPC), after it was created."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.file = open(path, "w", encoding="utf-8")  # noqa: SIM115 - closed in __exit__

    def __enter__(self) -> _FullVolume:
        return self

    def __exit__(self, *_: object) -> None:
        self.file.close()

    def write(self, _text: str) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), self.path)


@pytest.mark.parametrize(
    ("full", "what"),
    [(LEASE_FILE, "the chief's lease"), (MANIFEST_FILE, "the run manifest")],
)
def test_a_full_volume_is_one_line_and_exit_5(tmp_path: Path, monkeypatch, full: str, what: str):
    """Taking the lease and writing the manifest on a full volume: a raw OSError and exit 1
    before; now one line naming the file, exit 5, and no half-written temporary file."""
    real_open = open

    def opener(file: object, mode: str = "r", *args: object, **kwargs: object) -> object:
        if "w" in mode and os.path.basename(str(file)).startswith(full):
            return _FullVolume(str(file))
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr(storage, "open", opener, raising=False)  # storage.write_text's open
    guard = RunGuard(
        str(tmp_path), Config(), {contract.ENV_POD_NAME: "tfd-worker-0"}, Log(0, io.StringIO())
    )
    guard.check()
    with pytest.raises(CheckpointError) as caught, guard.training(is_chief=True):
        guard.record(64, "fp32")
    assert caught.value.exit_code == EXIT_CHECKPOINT == 5
    assert str(caught.value) == f"no space left on {tmp_path / full}: {what} not written"
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "a failed write left files behind"
