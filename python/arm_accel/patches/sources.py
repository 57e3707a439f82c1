"""Reading the stock sources the patch table pins: their digests, live or from files.

A digest is the first 16 hex digits of the sha256 of what ``inspect.getsource`` gives for the
object (a function, class or module). :func:`file_digest` computes the same text from a file
without importing it (``inspect``'s own block finder on the definition found by ``ast``), so a
pin can be checked against another installation or a source tree.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import inspect
from functools import cache
from pathlib import Path
from typing import Any

from arm_accel.patches.model import Pin


def text_digest(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:16]


@cache
def source_digest(obj: Any) -> str | None:
    """The digest of ``obj``'s source (a function, class or module); None without one."""
    try:
        source = inspect.getsource(obj)
    except (OSError, TypeError):
        return None
    return text_digest(source)


def resolve(ref: str) -> Any:
    """The object ``"module:qualname"`` (or ``"module"``) names; raises LookupError."""
    module_name, _, qualname = ref.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise LookupError(f"{module_name} cannot be imported: {exc}") from exc
    for part in filter(None, qualname.split(".")):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise LookupError(f"{ref}: no attribute {part!r}") from None
    return obj


def live_digest(ref: str) -> str | None:
    """The digest of the installed source ``ref`` names; None when it has none or is missing."""
    try:
        return source_digest(resolve(ref))
    except LookupError:
        return None


@cache
def version(distribution: str) -> str | None:
    """The installed version of ``distribution`` (local suffix dropped), read without import
    (once per process: each read scans the path's distributions)."""
    from importlib import metadata

    try:
        return metadata.version(distribution).split("+", 1)[0]
    except metadata.PackageNotFoundError:
        return None


def version_matches(found: str | None, accepted: tuple[str, ...]) -> bool:
    """``found`` is one of ``accepted`` or starts with one of them and a dot (``"2.13"``)."""
    if found is None:
        return False
    base = found.split("+", 1)[0]
    return any(base == a or base.startswith(a + ".") for a in accepted)


def pin_failure(pin: Pin, digest: str | None, torch_version: str | None) -> str | None:
    """Why ``pin`` does not hold for a source of digest ``digest`` under ``torch_version``
    (None: it holds)."""
    if not pin.digests:
        if version_matches(torch_version, pin.torch):
            return None
        return f"{pin.ref} read on torch {', '.join(pin.torch)} only (found {torch_version})"
    if digest is None:
        return f"{pin.ref} not found"
    if digest in pin.digests.values():
        return None
    read = ", ".join(f"{v}: {d}" for v, d in pin.digests.items())
    return f"{pin.ref} source changed (digest {digest}; modelled {read})"


def live_failure(pin: Pin) -> str | None:
    """Why ``pin`` does not hold in this process (None: it holds)."""
    return pin_failure(pin, live_digest(pin.ref) if pin.digests else None, version("torch"))


# ----------------------------------------------------------------------- from files


def module_file(root: Path, module: str) -> Path | None:
    """The file of ``module`` under ``root``: a site-packages directory or a source tree (where
    the top package may be the tree itself, as in executorch's repository)."""
    parts = module.split(".")
    for base in (root, root / parts[0]):
        for candidate in (parts, parts[1:]):
            if not candidate:
                continue
            stem = base.joinpath(*candidate)
            for path in (stem.with_suffix(".py"), stem / "__init__.py"):
                if path.is_file():
                    return path
    return None


def _definition_line(tree: ast.Module, qualname: str) -> int | None:
    """The 0-based line ``inspect.findsource`` starts ``qualname``'s source at (its first
    decorator's, else its ``def``/``class`` line)."""
    body: list[ast.stmt] = tree.body
    node: ast.stmt | None = None
    for part in qualname.split("."):
        node = next(
            (
                n
                for n in body
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                and n.name == part
            ),
            None,
        )
        if node is None:
            return None
        body = node.body
    assert node is not None
    decorators = getattr(node, "decorator_list", [])
    return (decorators[0].lineno if decorators else node.lineno) - 1


def file_digest(root: Path, ref: str) -> str | None:
    """The digest ``inspect.getsource`` would give for ``ref`` in the installation or source
    tree at ``root``, read from its file; None when the module or definition is missing."""
    module, _, qualname = ref.partition(":")
    path = module_file(root, module)
    if path is None:
        return None
    text = path.read_text(encoding="utf-8")
    if not qualname:
        return text_digest(text)
    start = _definition_line(ast.parse(text), qualname)
    if start is None:
        return None
    lines = text.splitlines(keepends=True)
    return text_digest("".join(inspect.getblock(lines[start:])))


__all__ = [
    "file_digest",
    "live_digest",
    "live_failure",
    "module_file",
    "pin_failure",
    "resolve",
    "source_digest",
    "text_digest",
    "version",
    "version_matches",
]
