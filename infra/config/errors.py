"""The one error of the stack configuration, and how each of its lines is written."""

from __future__ import annotations

from typing import Any

import pulumi

PROJECT = "tf-distributed"
"""Pulumi project name; project config keys are ``tf-distributed:<key>``."""


class ConfigError(pulumi.RunError, ValueError):
    """The stack configuration breaks a rule; one line per problem: ``<key>: <rule>; got <v>``.

    A :class:`pulumi.RunError`, so ``pulumi preview``/``up`` print the message alone, without a
    Python traceback.
    """

    def __init__(self, problems: list[str]) -> None:
        self.problems = tuple(problems)
        super().__init__(
            "invalid stack configuration (nothing was registered):\n  " + "\n  ".join(problems)
        )


def problem(key: str, rule: str, value: Any) -> str:
    """One line of a :class:`ConfigError`: ``tf-distributed:<key>: <rule>; got <value>``."""
    return f"{PROJECT}:{key}: {rule}; got {value!r}"
