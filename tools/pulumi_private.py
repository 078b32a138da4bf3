"""Every private Pulumi SDK use of the offline renderer (``tools/render.py``), each with its reason.

The renderer runs the program under the SDK's public testing API: ``pulumi.runtime.reset_options``
(a fresh root Stack per render), ``set_all_config``, ``set_mocks`` and ``test`` (runs the program
and waits for every registration). The Automation API is no alternative: it needs the Pulumi CLI.
What that public API does not give is here, one function or class per missing piece; nothing
else in ``tools/`` imports SDK internals. An SDK upgrade that changes one of them fails the
render tests (``tests/tools/test_render.py``, ``tests/infra``).

The program has exactly one private use, kept in the program (``infra/`` must not import
tooling): ``infra.config.runtime._runtime_config`` reads the whole config mapping (the unknown-key
check), which ``pulumi.Config`` cannot list.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# Private: pulumi.runtime exports the Mocks API but not this class (set_mocks takes one).
from pulumi.runtime.mocks import MockMonitor

ROOT_STACK_TYPE = "pulumi:pulumi:Stack"

OptionsSink = Callable[[str, str, dict[str, Any]], None]
"""Receives ``(type, name, options)`` for each registration; see :class:`OptionsMonitor`."""


class OptionsMonitor(MockMonitor):
    """The mock engine, also passing on the resource options of each registration.

    Why private: ``Mocks.new_resource`` receives type, name, inputs, provider and id only; no
    public API shows an offline run the options the engine would get (``ignore_changes``,
    ``retain_on_delete``, ``depends_on`` expanded, ``replace_on_changes``,
    ``delete_before_replace``, ``custom_timeouts``) or the resource's URN. This overrides the
    monitor's gRPC method and reads the engine protocol's ``RegisterResourceRequest``.
    """

    def __init__(self, mocks: Any, sink: OptionsSink) -> None:
        super().__init__(mocks)
        self._sink = sink

    def RegisterResource(self, request):  # noqa: N802 - gRPC method name
        timeouts = request.customTimeouts
        self._sink(
            request.type,
            request.name,
            {
                # The engine leaves the root stack's type out of its children's URNs (the
                # mocks keep it): what `pulumi import --parent` and `--exclude` must be given.
                "urn": self.make_urn(request.parent, request.type, request.name).replace(
                    f"::{ROOT_STACK_TYPE}$", "::"
                ),
                "ignore_changes": tuple(request.ignoreChanges),
                "retain_on_delete": bool(request.retainOnDelete),
                "dependencies": tuple(request.dependencies),
                "replace_on_changes": tuple(request.replaceOnChanges),
                "delete_before_replace": bool(request.deleteBeforeReplace),
                "custom_timeouts": {
                    k: v
                    for k in ("create", "update", "delete")
                    if (v := getattr(timeouts, k)) and request.HasField("customTimeouts")
                },
            },
        )
        return super().RegisterResource(request)


def stack_outputs(root: Any) -> dict[str, Any]:
    """The outputs the program exported (``pulumi.export``) on the root Stack ``root``.

    Why private: ``set_mocks`` finishes the root Stack before the program runs, so its exports
    never reach the monitor (``RegisterResourceOutputs``); they stay in the Stack's ``outputs``
    attribute, and no public API reads a stack's outputs back inside the program.
    """
    return dict(getattr(root, "outputs", None) or {})
