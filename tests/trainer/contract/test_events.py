"""The event names: every name the trainer writes is the contract's, which ``tfd`` reads."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from tfd.events import WorkerLog, parse_lines
from trainer.contract.events import (
    DONE_EVENTS,
    FORMING_EVENTS,
    NOTABLE_EVENTS,
    RESTART_EVENTS,
    TRAINING_EVENTS,
    Event,
)
from trainer.logs import Log

TRAINER = Path(__file__).resolve().parents[3] / "trainer"
# `log.event("name"`, `ctx.log.event(\n "name"`, the supervisor's `_log("name"`.
WRITTEN = re.compile(r"(?:\.event|\b_log)\(\s*\"([a-z_]+)\"")


def written_names() -> dict[str, str]:
    names: dict[str, str] = {}
    for path in sorted(TRAINER.rglob("*.py")):
        for name in WRITTEN.findall(path.read_text()):
            names.setdefault(name, str(path.relative_to(TRAINER.parent)))
    return names


def test_every_event_the_trainer_writes_is_in_the_contract() -> None:
    names = written_names()
    assert len(names) >= 20, f"the scan found too few event names: {sorted(names)}"
    unknown = {n: where for n, where in names.items() if n not in set(Event)}
    assert not unknown, f"events written but not in trainer.contract.Event: {unknown}"


def test_every_contract_event_is_written_somewhere() -> None:
    # The scan reads calls spread over lines too, so an unused name is a member to delete.
    unused = set(Event) - set(written_names())
    assert not unused, f"trainer.contract.Event members nothing writes: {sorted(unused)}"


def test_a_name_outside_the_contract_is_refused() -> None:
    with pytest.raises(ValueError, match="progres"):
        Log(0, io.StringIO()).event("progres", step=1)


@pytest.mark.parametrize(
    ("group", "state"),
    [(TRAINING_EVENTS, "training"), (FORMING_EVENTS, "forming"),
     (RESTART_EVENTS, "restarting"), (DONE_EVENTS, "done")],
    ids=["training", "forming", "restarting", "done"],
)  # fmt: skip
def test_tfd_reads_each_written_event_of_a_group_as_its_state(group: frozenset, state: str) -> None:
    for event in sorted(group):
        out = io.StringIO()
        Log(1, out).event(event, step=3)
        log = WorkerLog(1, parse_lines(out.getvalue().splitlines()))
        assert log.state() == state, f"{event}: tfd read {log.state()!r}, not {state!r}"


def test_the_groups_are_disjoint_and_notable_events_are_events() -> None:
    groups = [TRAINING_EVENTS, FORMING_EVENTS, RESTART_EVENTS, DONE_EVENTS]
    assert sum(map(len, groups)) == len(frozenset().union(*groups)), groups
    assert set(Event) >= NOTABLE_EVENTS
