"""ruamel.yaml's C parser, which arm-accel installs (``ruamel.yaml.clib``; ruamel.yaml 0.19 no
longer depends on it): executorch's import parses its edge dialect's YAML with it, and what it
parses equals ruamel.yaml's pure-Python parse of the same file, value and type for value and
type."""

from __future__ import annotations

from importlib import resources
from typing import Any

import executorch.exir.dialects.edge as edge_package
from executorch.exir.dialects.edge import _ops as edge_ops
from ruamel.yaml import YAML
from ruamel.yaml import main as ruamel_main


def typed(value: Any) -> Any:
    """``value`` with every leaf paired with its type's name (``True`` and ``"True"``, ``1`` and
    ``1.0`` told apart), containers by their own types."""
    if isinstance(value, dict):
        return ("dict", {k: typed(v) for k, v in value.items()})
    if isinstance(value, list):
        return ("list", [typed(v) for v in value])
    return (type(value).__name__, value)


def edge_yaml() -> str:
    return resources.files(edge_package).joinpath("edge.yaml").read_text(encoding="utf-8")


def test_executorch_safe_loader_uses_the_c_parser() -> None:
    """The safe loader executorch builds (``YAML(typ="safe")``) gets ruamel's C parser: fails
    where ``ruamel.yaml.clib`` is not installed (the pure parser would run)."""
    assert ruamel_main.CParser is not None, "ruamel.yaml.clib is not installed"
    assert YAML(typ="safe").Parser is ruamel_main.CParser


def test_c_parse_equals_the_pure_parse() -> None:
    """edge.yaml parsed by the C parser equals the pure-Python parser's result, typed."""
    text = edge_yaml()
    c_parsed = YAML(typ="safe").load(text)
    pure = YAML(typ="safe", pure=True)
    assert pure.Parser is not ruamel_main.CParser
    pure_parsed = pure.load(text)
    assert len(pure_parsed) > 100
    assert typed(c_parsed) == typed(pure_parsed)


def test_edge_dialect_info_equals_the_pure_parse() -> None:
    """executorch's ``_edge_dialect_info`` (built at its import) equals what
    ``_load_edge_dialect_info`` builds from the pure-Python parse, typed."""
    pure_parsed = YAML(typ="safe", pure=True).load(edge_yaml())
    want = {entry["inherits"]: entry for entry in pure_parsed}
    assert typed(edge_ops._edge_dialect_info) == typed(want)
