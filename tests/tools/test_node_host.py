"""What ``cluster up`` reclaims from a real node that no longer runs (``tools/node_host.py``),
on this machine's own interfaces and cgroups: a bridge is created here and removed again."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tools import node_host
from tools.real_node_config import Names

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("ip") is None,
    reason="creates a network interface and cgroups: needs root and iproute2",
)


@pytest.fixture
def bridge() -> Iterator[Names]:
    """A node's bridge and cgroups as ``host_up`` leaves them, under names of this test's own
    (never another checkout's node: ``reclaim`` is called on these names only)."""
    names = Names.for_tag(uuid.uuid4().hex[:6])
    subprocess.run(["ip", "link", "add", names.bridge, "type", "bridge"], check=True)
    node_host.make_cgroups(names)
    yield names
    subprocess.run(["ip", "link", "del", names.bridge], check=False, capture_output=True)
    node_host.remove_cgroups(names)


def test_a_dead_nodes_bridge_and_cgroups_are_removed(bridge: Names) -> None:
    assert node_host.reclaim(bridge)
    assert not Path(f"/sys/class/net/{bridge.bridge}").exists(), f"{bridge.bridge} kept"
    left = [h for h in node_host.cgroup_hierarchies() if (h / bridge.cgroup).exists()]
    assert left == [], f"cgroups of {bridge.bridge} kept: {left}"


def test_a_node_with_a_process_in_its_cgroups_is_kept(bridge: Names) -> None:
    memory = Path("/sys/fs/cgroup/memory") / bridge.cgroup
    with subprocess.Popen(["sleep", "60"]) as pod:
        try:
            (memory / "cgroup.procs").write_text(str(pod.pid))
            assert node_host.node_alive(bridge)
            assert not node_host.reclaim(bridge)
            assert Path(f"/sys/class/net/{bridge.bridge}").exists(), f"{bridge.bridge} removed"
        finally:
            pod.kill()
            pod.wait()
