"""Fresh attribute names for the quantization flow's new modules and constants
(``get_new_attr_name_with_prefix``), found by dict lookups.

torch.ao's and torchao's ``get_new_attr_name_with_prefix(prefix)`` return a function giving
the first ``prefix + str(i)``, ``i = 0, 1, ...``, that ``hasattr(module, name)`` rejects. Each
call tries every name taken before, and on an ``nn.Module`` each ``hasattr`` of a missing name
raises inside ``Module.__getattr__``: ``prepare_pt2e`` names its n-th observer after n tries,
quadratic in the observers (1,940 at ``llama16``: 3.9 s of a 12.4 s ``prepare_pt2e``). Where
the module's attribute lookup is ``nn.Module``'s own, :func:`first_free` answers each try from
the dicts that lookup reads. Why that is ``hasattr``'s answer: design.md, "The quantization
flow".
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import torch

from arm_accel.quantize.patch import run_accelerated

#: ``stats()`` entry: one call per name asked for (also the patch table's rows).
STATS_NAME = "quantize.attr_names"

NameSearch = Callable[[Any], str]


def first_free(module: Any, prefix: str) -> str | None:
    """The first ``prefix + str(i)`` that ``hasattr(module, ...)`` rejects, or None where the
    module's lookup is not ``nn.Module``'s (its class overrides ``__getattribute__`` or
    ``__getattr__``, the instance lacks the parameter, buffer or module dict) or a class
    attribute bears a name tried (its descriptor decides)."""
    cls: Any = type(module)
    if cls.__getattribute__ is not object.__getattribute__:
        return None
    if getattr(cls, "__getattr__", None) is not torch.nn.Module.__getattr__:
        return None
    own = getattr(module, "__dict__", None)
    if type(own) is not dict:
        return None
    params, buffers, modules = own.get("_parameters"), own.get("_buffers"), own.get("_modules")
    if not (isinstance(params, dict) and isinstance(buffers, dict) and isinstance(modules, dict)):
        return None
    classes = [vars(c) for c in cls.__mro__]
    tried: Sequence[str] = _made.get(prefix, ())
    i = 0
    while True:
        if i == len(tried):
            tried = _keep(prefix, [*tried, *(prefix + str(j) for j in range(i, 2 * i + 16))])
        name = tried[i]
        i += 1
        # Found by Module.__getattr__ whatever the class holds: taken (observers are modules).
        if name in modules or name in buffers or name in params:
            continue
        if any(name in c for c in classes):
            return None
        if name not in own:
            return name


#: Per prefix, the names ``prefix + str(i)`` made so far (the search tries them in order on
#: every call), at most ``_PREFIXES`` prefixes. A list is never changed once kept: a longer one
#: replaces it (threads searching at once each see a whole list).
_made: dict[str, list[str]] = {}
_PREFIXES = 64


def _keep(prefix: str, tried: list[str]) -> list[str]:
    """Keep ``tried`` as ``prefix``'s names; returns it."""
    if prefix not in _made and len(_made) >= _PREFIXES:
        _made.clear()
    _made[prefix] = tried
    return tried


def names(stock: Callable[[str], NameSearch]) -> Callable[[str], NameSearch]:
    """The ``get_new_attr_name_with_prefix`` the patch table installs: stock's (which checks
    and normalises the prefix) wrapped by a search that asks :func:`first_free` first, stock's
    function where the switch is off or the module is not modelled."""

    @functools.wraps(stock)
    def get_new_attr_name_with_prefix(prefix: str) -> NameSearch:
        stock_search = stock(prefix)
        plain = prefix.replace(".", "_")

        def get_new_attr_name(module: Any) -> str:
            def accelerated() -> tuple[bool, Any]:
                name = first_free(module, plain)
                if name is None:
                    return False, "the module's attribute lookup is not modelled"
                return True, name

            return run_accelerated(  # type: ignore[no-any-return]
                STATS_NAME, lambda: None, accelerated, lambda: stock_search(module)
            )

        return get_new_attr_name

    return get_new_attr_name_with_prefix


__all__ = ["STATS_NAME", "first_free", "names"]
