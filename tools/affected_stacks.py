"""Which stacks a change affects: the pull-request workflow previews exactly those.

    python3 tools/affected_stacks.py --base SHA --head SHA --stacks "prod"

prints ``stacks=<JSON list>`` (a ``$GITHUB_OUTPUT`` line). A stack is affected when its own
``Pulumi.<stack>.yaml`` changed, or anything every stack deploys: the program, the policy pack,
the trainer image's sources, their pins. Standard library only (it runs before any venv).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = (
    "Pulumi.yaml",
    "__main__.py",
    "infra/*",
    "policy/*",
    "trainer/*",
    "Dockerfile",
    ".dockerignore",
    "requirements.txt",
    "requirements/infra.txt",
    "requirements/trainer.txt",
)
"""Paths every stack deploys (``fnmatch`` patterns; ``*`` also matches ``/``)."""


def affected(changed: Iterable[str], stacks: Sequence[str]) -> list[str]:
    """The stacks of ``stacks`` (in order) that the changed paths affect."""
    paths = list(changed)
    shared = any(fnmatch.fnmatch(p, pattern) for p in paths for pattern in SHARED)
    return [s for s in stacks if shared or f"Pulumi.{s}.yaml" in paths]


def changed_paths(base: str, head: str) -> list[str]:
    out = subprocess.run(
        ["git", "diff", "--name-only", f"{base}...{head}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return [line for line in out.stdout.splitlines() if line]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="affected_stacks.py", description=__doc__.split("\n")[0])
    parser.add_argument("--base", required=True, help="base commit of the pull request")
    parser.add_argument("--head", required=True, help="head commit of the pull request")
    parser.add_argument("--stacks", required=True, help="stacks CI can preview, comma/space list")
    args = parser.parse_args(argv)
    stacks = [s for s in args.stacks.replace(",", " ").split() if s]
    for stack in stacks:
        if not (ROOT / f"Pulumi.{stack}.yaml").is_file():
            print(f"error: --stacks: no Pulumi.{stack}.yaml for stack {stack!r}", file=sys.stderr)
            return 2
    try:
        paths = changed_paths(args.base, args.head)
    except subprocess.CalledProcessError as exc:
        print(f"error: git diff {args.base}...{args.head}: {exc.stderr.strip()}", file=sys.stderr)
        return 2
    print(f"stacks={json.dumps(affected(paths, stacks))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
