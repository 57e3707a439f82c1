"""The package's layers (design.md "Layout"): every ``arm_accel`` import, read from the sources
with ``ast`` (module level and inside functions), goes from a layer to one below it."""

from __future__ import annotations

import ast
import pathlib

import arm_accel

#: Top to bottom, as design.md lists them.
LAYERS = (
    "tools",
    "bootstrap",
    "quantize",
    "edge",
    "pipeline",
    "fxstock",
    "runtime",
    "native",
    "control",
    "patches",
)
#: (importing module, imported module) allowed to reach up, with why (design.md).
EXCEPTIONS = {
    # the swapped pass classes are built on the accelerated pass base when they are installed
    ("arm_accel.patches.class_swap", "arm_accel.pipeline.passes.base"),
}
ROOT = pathlib.Path(arm_accel.__file__).parent


def _module(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: pathlib.Path) -> set[str]:
    """Every absolute ``arm_accel.*`` module ``path`` imports (``from X import y`` counts X)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name.startswith("arm_accel.")}


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else None


def test_every_import_goes_down() -> None:
    """No module imports from a layer above its own, except the declared exceptions; the scan
    found the layered modules (a scan that read nothing would pass)."""
    upward = []
    scanned = 0
    for path in sorted(ROOT.rglob("*.py")):
        module = _module(path)
        source = _layer(module)
        if source is None:
            continue
        scanned += 1
        for imported in sorted(_imports(path)):
            target = _layer(imported)
            if target is None or target == source or (module, imported) in EXCEPTIONS:
                continue
            if LAYERS.index(target) < LAYERS.index(source):
                upward.append(f"{module} -> {imported}")
    assert scanned > 40
    assert upward == []


def test_layers_are_the_packages() -> None:
    """Every subpackage of ``arm_accel`` is a declared layer and every layer exists."""
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")}
    assert packages == set(LAYERS)
