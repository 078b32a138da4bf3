"""Runs the policy pack the way the analyzer does, in the pack's own venv (``.venv-policy``).

    .venv-policy/bin/python -m tests.policy.pack_runner < cases.json

The test suite's venv cannot import pulumi-policy (protobuf 5.29 pin vs TensorFlow's 6), so
the tests render and change the stacks there and hand them here as JSON::

    [{"id": ..., "stack": ..., "config": {...},
      "resources": [{"type", "name", "inputs", "retain_on_delete"}]}]

Each policy's validate function gets the SDK's own argument types, the inputs behind the SDK's
unknown-checking proxy. Output (stdout, JSON): ``{"policies": [[name, enforcement level]],
"results": {id: {policy: [messages]}}}``; a policy that could not run because a value is
unknown at preview reports ``"unknown: <the SDK's message>"``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

from pulumi_policy import (
    PolicyCustomTimeouts,
    PolicyResource,
    PolicyResourceOptions,
    ResourceValidationArgs,
    StackValidationArgs,
)
from pulumi_policy.proxy import UnknownValueError, unknown_checking_proxy

from policy import pack

PROJECT = "tf-distributed"


def _opts(retain_on_delete: bool | None) -> PolicyResourceOptions:
    opts = PolicyResourceOptions(False, [], None, [], PolicyCustomTimeouts(0, 0, 0), [])
    if retain_on_delete is not None:
        # Not an SDK field: what the program declared (see policy.pack._resources).
        opts.retain_on_delete = retain_on_delete  # type: ignore[attr-defined]
    return opts


def run_case(case: dict[str, Any]) -> dict[str, list[str]]:
    stack, config = case["stack"], case.get("config") or {}
    found: dict[str, list[str]] = {}

    def call(name: str, validate: Callable[..., Any], args: Any) -> None:
        def report(message: str, urn: str | None = None) -> None:
            found.setdefault(name, []).append(message)

        try:
            validate(args, report)
        except UnknownValueError as exc:
            found.setdefault(name, []).append(f"unknown: {exc.message}")

    resources = case["resources"]
    urns = [f"urn:pulumi:{stack}::{PROJECT}::{r['type']}::{r['name']}" for r in resources]
    for name, (_, validate) in pack.RESOURCE_POLICIES.items():
        for r, urn in zip(resources, urns, strict=True):
            args = ResourceValidationArgs(
                r["type"],
                unknown_checking_proxy(r["inputs"]),
                urn,
                r["name"],
                _opts(None),
                None,
                dict(config),
            )
            call(name, validate, args)
    stack_resources = [
        PolicyResource(
            r["type"],
            unknown_checking_proxy(r["inputs"]),
            urn,
            r["name"],
            _opts(r.get("retain_on_delete")),
            None,
            None,
            [],
            {},
        )
        for r, urn in zip(resources, urns, strict=True)
    ]
    for name, (_, validate) in pack.STACK_POLICIES.items():
        call(name, validate, StackValidationArgs(stack_resources, dict(config)))
    return found


def main() -> int:
    cases = json.load(sys.stdin)
    out = {
        "policies": [[p.name, p.enforcement_level.value] for p in pack.policies()],
        "results": {case["id"]: run_case(case) for case in cases},
    }
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
