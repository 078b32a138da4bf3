"""kwok kept its informers' watches for the whole session (this module runs last on kwok's
cluster).

A watch that the apiserver ends leaves kwok polling by relists with a growing back-off: pods
reach Ready late, lease renewals conflict with a stale cache and a node can miss its heartbeat
and be tainted. ``tools/cluster.py`` turns the apiserver's WatchList off for that reason; this
reads kwok's own log to prove no watch was refused.
"""

from __future__ import annotations

import json

from tests.e2e.harness import Kube
from tools.cluster import STATE

KWOK_LOG = STATE / "logs" / "kwok.log"
# kwok's first line when it starts; its log is appended to by every cluster of the session.
KWOK_STARTED = "Watch nodes"
REFUSED_WATCH = "watch ended with error"
LEASE_CONFLICT = "Failed to sync lease"


def this_clusters_kwok_lines() -> list[str]:
    lines = KWOK_LOG.read_text(errors="replace").splitlines()
    starts = [i for i, line in enumerate(lines) if KWOK_STARTED in line]
    assert starts, f"{KWOK_LOG}: no kwok start ({KWOK_STARTED!r}) logged"
    return lines[starts[-1] :]


def test_kwok_kept_its_watches_and_its_node_leases(kube: Kube) -> None:
    assert kube.get("node", "tfd-cpu-0") is not None, "not kwok's cluster"
    lines = this_clusters_kwok_lines()
    refused = [line for line in lines if REFUSED_WATCH in line]
    assert not refused, f"{len(refused)} kwok watches ended by the apiserver, first: {refused[0]}"
    conflicts = [line for line in lines if LEASE_CONFLICT in line]
    assert not conflicts, (
        f"{len(conflicts)} node lease renewals from a stale cache, first: "
        f"{json.loads(conflicts[0]).get('err', conflicts[0])}"
    )
    renewed = sum('"Syncing lease"' in line for line in lines)
    assert renewed > 0, f"{KWOK_LOG}: kwok renewed no node lease at all"
