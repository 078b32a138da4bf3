"""Private Pulumi SDK imports stay where their reasons are written: ``tools/pulumi_private.py``
(the renderer's) and ``infra.config.runtime._runtime_config`` (the program's one)."""

from __future__ import annotations

import ast
from pathlib import Path

import pulumi
import pulumi.runtime

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("__main__.py", "infra", "tools", "policy", "trainer", "benchmarks")
EXPORTS = {"pulumi": set(pulumi.__all__), "pulumi.runtime": set(pulumi.runtime.__all__)}
"""What these two modules export: only those names are public."""
PUBLIC = {
    "pulumi.runtime.rpc",
    "pulumi.automation",
    "pulumi.dynamic",
    "pulumi.provider.experimental.provider",
    "pulumi.provider.experimental.property_value",
    "pulumi.provider.experimental.server",
}
"""SDK modules whose names without a leading ``_`` are public (``rpc`` is exported by
``pulumi.runtime``; ``pulumi.provider.experimental`` is the SDK's API for a provider of custom
resources, which ``pulumi.provider.Provider`` has no create or diff for: the stand-in Docker
provider's); every other ``pulumi.*`` module is internal."""
ALLOWED = {
    "infra/config/runtime.py": ["pulumi.runtime.config.CONFIG"],
    "tools/pulumi_private.py": ["pulumi.runtime.mocks.MockMonitor"],
}


def private_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [(alias.name, "") for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [(node.module, alias.name) for alias in node.names]
        else:
            continue
        for module, name in names:
            if module != "pulumi" and not module.startswith("pulumi."):
                continue
            if module in EXPORTS:
                private = bool(name) and name not in EXPORTS[module]
            else:
                private = module not in PUBLIC or name.startswith("_")
            if private:
                found.append(f"{module}.{name}" if name else module)
    return found


def test_private_sdk_imports_only_where_their_reasons_are() -> None:
    files = [ROOT / "__main__.py"]
    files += [p for d in SOURCES[1:] for p in sorted((ROOT / d).rglob("*.py"))]
    found = {
        str(path.relative_to(ROOT)): names for path in files if (names := private_imports(path))
    }
    assert found == ALLOWED, (
        "a private Pulumi SDK import outside tools/pulumi_private.py (the renderer's, each with "
        f"its reason) and infra.config.runtime._runtime_config (the program's one): {found}"
    )
