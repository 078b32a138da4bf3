"""The base of every component of this program.

Pulumi does not pass a component's ``depends_on`` to its children: a child of a component that
"depends on" the Namespace is still created concurrently with it (pulumi/pulumi#8721), and the
first ``pulumi up`` then fails with "namespace not found". :class:`Component` records the
component's own ``depends_on`` and :meth:`Component.child_opts` hands it to every child.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pulumi


class Component(pulumi.ComponentResource):
    """A ``ComponentResource`` whose children inherit its ``depends_on``."""

    def __init__(self, type_: str, name: str, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(type_, name, None, opts)
        inherited = opts.depends_on if opts is not None else None
        if inherited is None:
            self._inherited_deps: list[Any] = []
        elif isinstance(inherited, pulumi.Resource):
            self._inherited_deps = [inherited]
        else:
            self._inherited_deps = list(inherited)  # type: ignore[arg-type]

    def child_opts(
        self, *, depends_on: Sequence[pulumi.Resource] = (), **options: Any
    ) -> pulumi.ResourceOptions:
        """Options for a child: ``parent=self``, the inherited dependencies plus ``depends_on``,
        and any other resource option (``ignore_changes``, ``retain_on_delete``...)."""
        return pulumi.ResourceOptions(
            parent=self, depends_on=[*self._inherited_deps, *depends_on], **options
        )
