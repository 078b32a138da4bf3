"""The chief's lease on a run directory, ``chief.lease``: at most one live chief writes a run.

Two chiefs on one directory would prune each other's checkpoints and both write the final
files. The lease is a file with an expiry, renewed from a thread, so it needs no lock primitive
and works on every storage the trainer supports; the same holder (an in-place or pod restart)
takes it back at once, another is refused with exit 9. The rules, and what they assume (no
compare-and-swap, so a settle wait; agreeing clocks): docs/trainer.md, "Chief lease". Imports no
TensorFlow at import time.
"""

from __future__ import annotations

import json
import math
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from trainer import contract
from trainer.errors import EXIT_RUN_CONFLICT, RunConflictError
from trainer.logs import Log
from trainer.storage import read_text, remove, write_text

LEASE_FILE = "chief.lease"
RENEW_SECONDS = 10.0
"""How often the holder rewrites its lease."""
TTL_SECONDS = 3 * RENEW_SECONDS
"""A lease not renewed for this long has expired: another holder may take it."""
MAX_HOLD_SECONDS = 3600.0
"""The longest a lease may claim to be held past its renewal; a lease file that claims more
(or an expiry that is not a finite time) is not a lease."""
SETTLE_SECONDS = 1.0
"""Wait before reading back a lease just taken over: the last of two writers wins (no
compare-and-swap on these stores; docs/trainer.md, "Chief lease")."""


# --- The lease. ----------------------------------------------------------------------------------


def holder_identity(env: Mapping[str, str], deployment: str = "") -> str:
    """``<namespace>/<pod name>@<host>#<token>``: the same for every restart of one pod, and for
    the pod the StatefulSet recreates under the same name; local workers carry the launcher's
    names. Without a pod name (an explicit ``TF_CONFIG``) the process id stands in.

    The token tells deployments apart that give the chief the same names: ``deployment``, the
    StatefulSet's ``metadata.uid`` (``trainer.k8s``; new only when the StatefulSet is created
    again), else the launch's :data:`~trainer.contract.ENV_LAUNCH_ID` (``trainer.local``).
    With neither (no API access, its read failed) there is no ``#<token>``: chiefs with the
    same names are then one holder, as before tokens existed."""
    names = [env.get(k, "").strip() for k in (contract.ENV_NAMESPACE, contract.ENV_POD_NAME)]
    who = "/".join(n for n in names if n) or f"pid-{os.getpid()}"
    token = deployment.strip() or env.get(contract.ENV_LAUNCH_ID, "").strip()
    return f"{who}@{socket.gethostname()}" + (f"#{token}" if token else "")


def utc(seconds: float) -> str:
    """Unix seconds as an ISO 8601 UTC time (``2026-12-03T10:00:00Z``)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


@dataclass(frozen=True)
class LeaseRecord:
    """The content of the lease file."""

    holder: str
    expires_at: float
    """Unix seconds on the holder's clock."""
    renewed_at: float

    def to_text(self) -> str:
        return json.dumps({**asdict(self), "expires_utc": utc(self.expires_at)}) + "\n"

    @classmethod
    def parse(cls, text: str, where: str) -> LeaseRecord:
        """Raises: RunConflictError naming ``where`` when the text is not a lease."""
        try:
            doc = json.loads(text)
            record = cls(str(doc["holder"]), float(doc["expires_at"]), float(doc["renewed_at"]))
            # A lease no chief could have written (an expiry that is not a time, or one that
            # never comes) must not hold a run forever, nor crash the reader.
            held_for = record.expires_at - record.renewed_at
            if not (math.isfinite(record.renewed_at) and 0 <= held_for <= MAX_HOLD_SECONDS):
                raise ValueError(record)
            return record
        except (ValueError, KeyError, TypeError, OverflowError):
            raise RunConflictError(
                f"{where}: must be a JSON lease with holder, expires_at and renewed_at (Unix "
                f"seconds, held at most {MAX_HOLD_SECONDS:.0f} s past renewed_at); got "
                f"{text.strip()[:200]!r}; delete it only if no chief is running"
            ) from None


def _exit_lost(message: str) -> None:
    """Leave now with exit 9: the main thread may be inside a TensorFlow call for long."""
    print(f"{contract.ERROR_PREFIX}{message}", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(EXIT_RUN_CONFLICT)


class Lease:
    """The chief's lease on ``root`` (see the module docstring): :meth:`acquire`, then
    :meth:`release`; a thread renews it in between."""

    def __init__(
        self,
        root: str,
        holder: str,
        log: Log,
        *,
        renew_seconds: float = RENEW_SECONDS,
        ttl_seconds: float = TTL_SECONDS,
        settle_seconds: float = SETTLE_SECONDS,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        on_lost: Callable[[str], None] = _exit_lost,
    ) -> None:
        self.path = f"{root.rstrip('/')}/{LEASE_FILE}"
        self.holder = holder
        self.log = log
        self.renew_seconds = renew_seconds
        self.ttl_seconds = ttl_seconds
        self.settle_seconds = settle_seconds
        self.clock = clock
        self.sleep = sleep  # the settle wait: tests see it without timing it
        self.on_lost = on_lost
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._tag = f"{holder}-{os.getpid()}"

    def read(self) -> LeaseRecord | None:
        text = read_text(self.path)
        return None if text is None else LeaseRecord.parse(text, self.path)

    def _write(self) -> LeaseRecord:
        now = self.clock()
        record = LeaseRecord(self.holder, now + self.ttl_seconds, now)
        write_text(self.path, record.to_text(), "the chief's lease", self._tag)
        return record

    def _held_by_other(self, current: LeaseRecord) -> str:
        now = self.clock()
        return (
            f"{self.path}: another chief holds this run: lease of {current.holder} expires at "
            f"{utc(current.expires_at)} (in {max(0.0, current.expires_at - now):.0f} s; renewed "
            f"every {self.renew_seconds:g} s while it runs); this chief is {self.holder}; "
            "nothing was written"
        )

    def acquire(self) -> None:
        """Take the lease and start renewing it.

        Raises:
            RunConflictError: another holder's lease has not expired (nothing was written), or
                another chief took the free lease at the same moment and won.
            CheckpointError: the directory cannot be read, or the lease cannot be written
                (``no space left on <lease path>`` for a full volume).
        """
        current = self.read()
        now = self.clock()
        if current is not None and current.holder != self.holder and current.expires_at > now:
            raise RunConflictError(self._held_by_other(current))
        record = self._write()
        if current is None or current.holder != self.holder:
            # A free or expired lease: another chief may be taking it right now.
            self.sleep(self.settle_seconds)
            back = self.read()
            if back is None or back.holder != self.holder:
                raise RunConflictError(
                    self._held_by_other(back) if back else f"{self.path}: removed while taken"
                )
        previous: dict[str, Any] = {}
        if current is not None:
            previous = {"previous_holder": current.holder,
                        "previous_expired": current.expires_at <= now}  # fmt: skip
        self.log.event("lease", path=self.path, holder=self.holder,
                       expires_utc=utc(record.expires_at), renew_seconds=self.renew_seconds,
                       ttl_seconds=self.ttl_seconds, **previous)  # fmt: skip
        self._stop.clear()
        self._thread = threading.Thread(target=self._renew_loop, name="tfd-lease", daemon=True)
        self._thread.start()

    def renew(self) -> bool:
        """One renewal: rewrite the lease if it is still ours. False (after ``on_lost``) when
        another holder has it; storage errors are left to the caller."""
        try:
            current = self.read()
        except RunConflictError as err:  # garbage in our own lease file: ours to overwrite
            self.log.event("warning", message=f"lease renewal overwrites it: {err}")
            current = None
        if current is not None and current.holder != self.holder:
            self.on_lost(
                f"{self.path}: lease lost to {current.holder} (expires at "
                f"{utc(current.expires_at)}): this chief could not renew it within "
                f"{self.ttl_seconds:g} s; stopping before another write"
            )
            return False
        self._write()
        return True

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.renew_seconds):
            try:
                if not self.renew():
                    return
            except Exception as err:  # noqa: BLE001 - a storage hiccup: the next period retries
                self.log.event("warning", message=f"{self.path}: lease renewal failed, next "
                               f"try in {self.renew_seconds:g} s: {err}")  # fmt: skip

    def verify(self) -> None:
        """Raises: RunConflictError when the lease is no longer this holder's."""
        current = self.read()
        if current is None or current.holder != self.holder:
            raise RunConflictError(
                f"{self.path}: lease no longer held by this chief ({self.holder}); now "
                f"{current.holder if current else 'absent'}; not writing the final files"
            )

    def release(self, restarting: bool = False) -> None:
        """Stop renewing and delete the lease if it is still ours, or with ``restarting`` mark
        it expired (errors are logged)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.renew_seconds + 30)
            self._thread = None
        try:
            current = self.read()
            if current is not None and current.holder == self.holder and restarting:
                now = self.clock()
                record = LeaseRecord(self.holder, now, now)
                write_text(self.path, record.to_text(), "the chief's lease", self._tag)
            elif current is not None and current.holder == self.holder:
                remove(self.path)
        except Exception as err:  # noqa: BLE001 - it expires by itself
            self.log.event("warning", message=f"{self.path}: lease not released ({err}); it "
                           f"expires within {self.ttl_seconds:g} s")  # fmt: skip
