"""The Kubernetes API calls the trainer makes."""

from __future__ import annotations

from trainer import contract


def test_api_calls_are_the_documented_three():
    assert [tuple(c) for c in contract.API_CALLS] == [
        ("apps", "statefulsets", "get"),
        ("apps", "statefulsets/scale", "patch"),
        ("", "pods", "delete"),
    ]
    assert contract.api_resource_names(contract.API_CALLS[2], "w", 2) == ["w-0", "w-1"]
