"""The commands: ``status``, ``logs``, ``stop``, ``submit`` and ``runs`` (docs/commands.md).

Each is a thin layer over :class:`tfd.client.TfdClient`: it turns the flags into a call and
prints what comes back, as lines for people or JSON documents (``--json``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from tfd.client import TfdClient
from tfd.errors import EXIT_FAILED, EXIT_OK, EXIT_STOPPED
from tfd.follow import parse_duration
from tfd.phase import DONE, FAILED, STOPPED
from tfd.view import StatusView, print_json, runs_lines, runs_table, status_lines

PIPE_WIDTH = 200
OUTCOME = {DONE: EXIT_OK, FAILED: EXIT_FAILED, STOPPED: EXIT_STOPPED}


def run(args: argparse.Namespace) -> int:
    commands = {"status": status, "logs": logs, "stop": stop, "submit": submit, "runs": runs}
    return commands[args.command](args)


def client(args: argparse.Namespace) -> TfdClient:
    return TfdClient(args.stack, args.project_dir)


def _timeout(args: argparse.Namespace) -> float | None:
    return parse_duration(args.timeout, "--timeout") if args.timeout else None


def status(args: argparse.Namespace) -> int:
    tfd = client(args)
    if not args.watch:
        st = tfd.status()
        if args.json:
            print_json(st.to_json())
        else:
            print("\n".join(status_lines(st)))
        return EXIT_OK
    view = StatusView(args.json)
    try:
        st = tfd.watch(timeout_s=_timeout(args), on_status=view.show)
    finally:
        view.close()
    if not args.json:
        print("\n".join(status_lines(st)))
    return OUTCOME[st.phase]


def logs(args: argparse.Namespace) -> int:
    since_s = parse_duration(args.since, "--since") if args.since else None

    def emit(line: str) -> None:
        print(line, flush=True)

    client(args).logs(emit, args.worker, since_s, as_json=args.json, follow=args.follow)
    return EXIT_OK


def stop(args: argparse.Namespace) -> int:
    done = client(args).stop()
    if args.json:
        print_json(done.to_json())
    elif not done.stopped:
        print(f"run {done.run_id} on stack {done.stack} has no workers already (done or stopped)")
    else:
        print(
            f"stopped run {done.run_id} on stack {done.stack}: {done.workers_before} -> 0 "
            f"workers; checkpoints kept; resume with: tfd submit --stack {done.stack} --run-id "
            f"{done.run_id}"
        )
    return EXIT_OK


def runs(args: argparse.Namespace) -> int:
    from rich.console import Console

    out = client(args).runs().to_json()
    if args.json:
        print_json(out)
        return EXIT_OK
    console = Console(highlight=False)
    if not console.is_terminal:  # a pipe or a file: whole rows, not cut to 80 columns
        console = Console(highlight=False, width=PIPE_WIDTH)
    if out["runs"]:
        console.print(runs_table(out))
    for line in runs_lines(out):
        console.print(line, markup=False)
    return EXIT_OK


def submit(args: argparse.Namespace) -> int:
    from tfd import settings

    changes = settings.parse_sets(args.set)  # a malformed --set fails before anything is read
    view = StatusView(args.json)

    def output(line: str) -> None:  # the engine's own lines, as pulumi up prints them
        if not args.json:
            print(line, flush=True)

    try:
        done = client(args).submit(
            run_id=args.run_id,
            continue_run=args.continue_run,
            epochs=args.epochs,
            image=args.image,
            settings=changes,
            follow=args.follow,
            timeout_s=_timeout(args),
            on_status=view.show,
            on_notice=_notices(args.json, view),
            on_output=output,
        )
    finally:
        view.close()
    if not args.json:
        print("\n".join(status_lines(done.status)))
    return OUTCOME.get(done.status.phase, EXIT_OK)


def _notices(as_json: bool, view: StatusView) -> Callable[[dict[str, Any], str], None]:
    def say(doc: dict[str, Any], text: str) -> None:
        if as_json:
            print_json(doc)
        elif text:
            view.console.print(text, markup=False)

    return say
