"""``get_new_attr_name_with_prefix``'s search by dict lookups (``quantize/attr_names.py``)
against stock's ``hasattr`` loop: the same name on modules whose attributes, parameters,
buffers, submodules and class attributes take names of the prefix, stock's own search where
the lookup is not ``nn.Module``'s; installed where the quantization flow binds the function."""

from __future__ import annotations

import sys
from typing import Any

import executorch.backends.arm._passes  # noqa: F401 - activates arm-accel (the patches)
import pytest
import torch
from arm_accel import patches
from arm_accel.control import counters
from arm_accel.quantize import attr_names
from torch import fx

STOCK = patches.original("quantize.attr_names.pt2e_utils")


class WithClassAttrs(torch.nn.Module):
    obs_1 = 5  # a plain class attribute: hasattr is True

    @property
    def obs_3(self) -> int:  # a property that raises AttributeError: hasattr is False
        raise AttributeError("no")


class OwnGetattr(torch.nn.Module):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("obs_") and int(name[4:]) < 3:
            return 1
        return super().__getattr__(name)


def _filled(module: torch.nn.Module, taken: dict[str, str]) -> torch.nn.Module:
    """``module`` with each name of ``taken`` made an attribute of the kind given."""
    for name, kind in taken.items():
        if kind == "buffer":
            module.register_buffer(name, torch.zeros(1))
        elif kind == "parameter":
            module.register_parameter(name, torch.nn.Parameter(torch.zeros(1)))
        elif kind == "module":
            module.add_module(name, torch.nn.ReLU())
        else:
            object.__setattr__(module, name, 1)
    return module


KINDS = ("buffer", "parameter", "module", "plain")
CASES: list[tuple[str, torch.nn.Module]] = [
    ("empty", torch.nn.Module()),
    (
        "each kind",
        _filled(
            torch.nn.Module(), dict(zip(["obs_0", "obs_1", "obs_2", "obs_3"], KINDS, strict=True))
        ),
    ),
    ("a gap", _filled(torch.nn.Module(), {"obs_0": "buffer", "obs_2": "module"})),
    ("dotted prefix", _filled(torch.nn.Module(), {"a_b_0": "plain", "a_b_1": "buffer"})),
    ("graph module", _filled(fx.symbolic_trace(torch.nn.ReLU()), {"obs_0": "module"})),
    ("class attributes", _filled(WithClassAttrs(), {"obs_0": "buffer", "obs_2": "plain"})),
    ("own __getattr__", OwnGetattr()),
]


@pytest.mark.parametrize(("label", "module"), CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("prefix", ["obs_", "a.b_"])
def test_the_name_stock_finds(label: str, module: torch.nn.Module, prefix: str) -> None:
    """The installed function gives stock's name for each prefix; the dict search answers
    where the module's lookup is ``nn.Module``'s and no class attribute bears a name tried
    (``obs_1`` is one on ``WithClassAttrs``), and declines (stock's loop runs) elsewhere."""
    ours = sys.modules["torchao.quantization.pt2e.utils"].get_new_attr_name_with_prefix
    assert ours is not STOCK
    expected = STOCK(prefix)(module)
    counters.reset()
    assert ours(prefix)(module) == expected
    entry = counters.snapshot()[attr_names.STATS_NAME]
    declines = label == "own __getattr__" or (label == "class attributes" and prefix == "obs_")
    assert (entry.calls, entry.accelerated) == (1, 0 if declines else 1)
    if not declines:
        assert attr_names.first_free(module, prefix.replace(".", "_")) == expected


def test_many_names_in_order() -> None:
    """Names asked for one after another, each registered before the next (as prepare_pt2e
    registers its observers), some taken beforehand: stock's sequence."""
    taken = {f"p_{i}": KINDS[i % 4] for i in range(0, 40, 3)}
    stock_module, our_module = _filled(torch.nn.Module(), taken), _filled(torch.nn.Module(), taken)
    ours = sys.modules["torch.ao.quantization.fx.prepare"].get_new_attr_name_with_prefix
    got, want = [], []
    for _ in range(30):
        for search, module, out in ((STOCK, stock_module, want), (ours, our_module, got)):
            name = search("p_")(module)
            module.add_module(name, torch.nn.Identity())
            out.append(name)
    assert got == want


def test_installed_where_the_flow_binds_it() -> None:
    """Each binding the quantization flow calls holds the wrapper: prepare's observer names,
    the Arm passes' constants, torchao's ``create_getattr_from_value``."""
    for module in (
        "torch.ao.quantization.fx.prepare",
        "torchao.quantization.pt2e.utils",
        "executorch.backends.arm._passes.scalars_to_attribute_pass",
        "executorch.backends.arm._passes.deduplicate_get_attr_pass",
    ):
        function = sys.modules[module].get_new_attr_name_with_prefix
        assert function.__wrapped__ in (STOCK, patches.original("quantize.attr_names.fx_prepare"))
    assert patches.installed("quantize.attr_names")


def test_more_prefixes_than_the_names_kept() -> None:
    """More prefixes than the search keeps names for, asked twice in turn: stock's name each
    time (a prefix whose names were dropped makes them again)."""
    module = _filled(
        torch.nn.Module(), {f"k{p}_{i}": "buffer" for p in range(70) for i in range(3)}
    )
    for _ in range(2):
        for p in range(70):
            assert attr_names.first_free(module, f"k{p}_") == STOCK(f"k{p}_")(module) == f"k{p}_3"
