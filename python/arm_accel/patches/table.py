"""The declared table: every torch / executorch attribute arm-accel replaces, every pass class
it swaps, and every stock behaviour its code models, with the stock sources each was read from.

A row installs only where each pin holds (the running source's digest is one read, or, for a
C++ kernel, the running torch is one read) and its group's torch gate admits the running torch;
otherwise it stays stock and ``arm-accel info`` says which source changed. Digests are keyed by
the version they were read on (``arm-accel check-pins`` reads them from another installation).
Import-light: data only.
"""

from __future__ import annotations

from arm_accel.patches.model import ClassSwap, Group, Model, Patch, Pin

#: torch versions the whole stack was tested on (the activation's guard)
TORCH_VERSIONS = ("2.13", "2.14.0", "2.15.0")
EXECUTORCH_VERSIONS = ("1.5.1",)


def _same(digest: str, *versions: str) -> dict[str, str]:
    """One digest read identically on each of ``versions``."""
    return dict.fromkeys(versions, digest)


ALL_TORCH = ("2.13.0", "2.14.0", "2.15.0")
ET = ("1.5.1",)

# ---------------------------------------------------------------- pins, by stock source
# executorch (1.5.1 on every torch)
EXIR_PASS_BASE = Pin("executorch.exir.pass_base", _same("6fcafec2114721ee", *ET))
ARM_PASS = Pin("executorch.backends.arm._passes.arm_pass", _same("3f85a56fb4051267", *ET))
ARM_PASS_UTILS = Pin(
    "executorch.backends.arm._passes.arm_pass_utils", _same("f300a8ace6bd0923", *ET)
)


def _pass_modules(arm: tuple[str, str], transforms: tuple[str, str]) -> tuple[Pin, Pin]:
    """The Arm pass module and the ``backends/transforms`` module it subclasses."""
    return (
        Pin(f"executorch.backends.arm._passes.{arm[0]}", _same(arm[1], *ET)),
        Pin(f"executorch.backends.transforms.{transforms[0]}", _same(transforms[1], *ET)),
    )


# torch
PYTHON_CODE = Pin("torch.fx.graph:Graph.python_code", {"2.13.0": "a18c22f227f05adf"})
FORWARD_FROM_SRC = Pin(
    "torch.fx.graph_module:_forward_from_src", _same("69e8956ea0efa582", *ALL_TORCH)
)
RECOMPILE = Pin(
    "torch.fx.graph_module:GraphModule.recompile", _same("98adb1519c457ae4", *ALL_TORCH)
)
REDUCE = Pin("torch.fx.graph_module:GraphModule.__reduce__", _same("479fb053d55614ee", *ALL_TORCH))
REDUCE_PACKAGE = Pin(
    "torch.fx.graph_module:GraphModule.__reduce_package__",
    _same("4bec0f9856baf5d7", *ALL_TORCH),
)
DEPRECATED_BASE_CALL = Pin(
    "torch._export.pass_base:_ExportPassBaseDeprecatedDoNotUse.call",
    {"2.13.0": "5bba6f4a70059917"},
)
NODE_SOURCE = Pin("torch.fx.traceback:NodeSource", _same("0e29c3d55d6345c3", "2.13.0", "2.14.0"))
FAKE_DISPATCH = Pin(
    "torch._subclasses.fake_tensor:FakeTensorMode.dispatch", _same("1bb947a5c9aaef89", *ALL_TORCH)
)
COLLECT_CIA_OPS = Pin(
    "torch._export.utils:_collect_all_valid_cia_ops", _same("1d09a99ea79bd377", *ALL_TORCH)
)
CIA_OPS_SOURCES = (
    COLLECT_CIA_OPS,
    Pin(
        "torch._export.utils:_collect_all_valid_cia_ops_for_namespace",
        _same("c26d5cd619830773", *ALL_TORCH),
    ),
    Pin("torch._export.utils:_materialize_cpp_cia_ops", _same("51472f6b4e2c3782", *ALL_TORCH)),
    Pin("torch._export.utils:_is_preservable_cia_op", _same("00d78e92c3d6d9f6", *ALL_TORCH)),
    Pin("torch._export.utils:_check_valid_to_preserve", {"2.13.0": "a225772212a823aa"}),
    Pin("torch._export.utils:_is_cia_op", _same("4588c37719fb8356", *ALL_TORCH)),
)
CIA_OVERRIDE_SOURCES = (
    Pin(
        "torch.export.exported_program:_override_composite_implicit_decomp",
        {"2.13.0": "4422dc79d0792af7"},
    ),
    Pin("torch._ops:OperatorBase.py_impl", _same("8173bd205b783783", *ALL_TORCH)),
    Pin("torch._subclasses.fake_impls:register_op_impl", {"2.13.0": "405e93300718a185"}),
    Pin(
        "torch._subclasses.fake_impls:_is_op_registered_to_fake_rule",
        _same("b42b78458191b7ee", *ALL_TORCH),
    ),
)
POPULATE_PARAM_META = Pin(
    "torch._export.utils:_populate_param_buffer_metadata_to_new_gm",
    {"2.13.0": "89e75119b33fa818"},
)

EDGE_DTYPE_CHECK_SOURCES = (
    Pin(
        "executorch.exir.verification.verifier:_check_tensor_args_matching_op_allowed_dtype",
        _same("5223802f594bd06b", *ET),
    ),
    Pin("executorch.exir.verification.verifier:_get_inputs", _same("31f3f769363e4cae", *ET)),
    Pin(
        "executorch.exir.verification.arg_validator:EdgeOpArgValidator",
        _same("0ac1c71272c8ad21", *ET),
    ),
    Pin("torch._export.utils:_detect_fake_mode_from_gm", _same("a4e91e4071a50500", *ALL_TORCH)),
    Pin("torch._guards:detect_fake_mode", {"2.13.0": "29c2e083e96d8f1f"}),
    Pin("torch.fx.interpreter:Interpreter", _same("3323db2660e12de9", *ALL_TORCH)),
)

# ---------------------------------------------------------------- groups, in install order
_PKG = "arm_accel"

GROUPS: tuple[Group, ...] = (
    Group(
        name="passes",
        layer="pipeline",
        why="the view/permute passes: graph walks planned in Rust on the node table",
        independent=True,
        rows=(
            ClassSwap(
                "CanonicalizeViewCopyPermutePass",
                f"{_PKG}.passes.canonicalize:CanonicalizeViewCopyPermutePass",
                "chains of view/permute copies collected in Rust",
                _pass_modules(
                    ("canonicalize_view_copy_permute_pass", "55b4dc2ebbe1353a"),
                    ("canonicalize_view_copy_permute_pass", "fc548f564c9846b6"),
                ),
            ),
            ClassSwap(
                "FuseDuplicateUsersPass",
                f"{_PKG}.passes.fuse_duplicate_users:FuseDuplicateUsersPass",
                "duplicate users screened in Rust",
                _pass_modules(
                    ("fuse_duplicate_users_pass", "d5bb5bf4c3d4ae98"),
                    ("fuse_duplicate_users_pass", "2857b71e833c994a"),
                ),
            ),
            ClassSwap(
                "RemovePermutesAroundElementwiseTosaOps",
                f"{_PKG}.passes.remove_permutes_around_elementwise"
                ":RemovePermutesAroundElementwiseTosaOps",
                "the elementwise operator set as a constant bitset in Rust",
                _pass_modules(
                    ("remove_permutes_around_elementwise_tosa_ops", "88fe1cf799f6aeda"),
                    ("remove_permutes_around_elementwise_ops", "51b61024f7404c8a"),
                ),
            ),
            ClassSwap(
                "FuseIdenticalInputTransformsPass",
                f"{_PKG}.passes.fuse_identical_input_transforms:FuseIdenticalInputTransformsPass",
                "identical input transforms found in one table walk",
                _pass_modules(
                    ("fuse_identical_input_transforms_pass", "9931350b1b42cc81"),
                    ("fuse_identical_input_transforms_pass", "ca06f8b3241613a8"),
                ),
            ),
            ClassSwap(
                "PropagateViewCopyPermuteDownPass",
                f"{_PKG}.passes.propagate.accelerated:PropagateViewCopyPermuteDownPass",
                "every scan planned in Rust to the fixed point, the re-traces between modelled",
                _pass_modules(
                    ("propagate_view_copy_permute_pass", "7a2fcbcb4d7a2af3"),
                    ("propagate_view_copy_permute_pass", "2022dd12453cfe38"),
                ),
            ),
            ClassSwap(
                "PropagateViewCopyPermuteUpPass",
                f"{_PKG}.passes.propagate.accelerated:PropagateViewCopyPermuteUpPass",
                "every scan planned in Rust to the fixed point, the re-traces between modelled",
                _pass_modules(
                    ("propagate_view_copy_permute_pass", "7a2fcbcb4d7a2af3"),
                    ("propagate_view_copy_permute_pass", "2022dd12453cfe38"),
                ),
            ),
        ),
    ),
    Group(
        name="retrace_engine",
        layer="pipeline",
        why="every ExportPass re-trace of the Arm pipeline and to_edge in place; code generated "
        "when first used",
        torch=("2.13",),
        rows=(
            Patch(
                "retrace_engine.call",
                "executorch.exir.pass_base:_ExportPassBase",
                "call",
                f"{_PKG}.retrace_engine:accelerated_call",
                "the re-trace in place (stock re-trace on decline)",
                models=(EXIR_PASS_BASE,),
            ),
            Patch(
                "retrace_engine.deprecated_call",
                "torch._export.pass_base:_ExportPassBaseDeprecatedDoNotUse",
                "call",
                f"{_PKG}.retrace_engine:deprecated_base_call",
                "records ReplaceViewOpsWithViewCopyOpsPass's values as fresh",
                models=(DEPRECATED_BASE_CALL,),
            ),
            Patch(
                "retrace_engine.transform",
                "executorch.backends.arm._passes.arm_pass_manager:ArmPassManager",
                "_transform",
                f"{_PKG}.retrace_engine:transform",
                "the Arm pipeline's scope: its re-traces run in place",
            ),
            Patch(
                "retrace_engine.generate_edge_program",
                "executorch.exir.program._program",
                "_generate_edge_program",
                f"{_PKG}.retrace_engine:generate_edge_program",
                "to_edge's own ExportPass passes run in place",
            ),
            Patch(
                "retrace_engine.python_code",
                "torch.fx:Graph",
                "python_code",
                f"{_PKG}.retrace_engine:python_code",
                "generated code memoised on what it is made of",
                models=(PYTHON_CODE,),
            ),
            Patch(
                "retrace_engine.forward_from_src",
                "torch.fx.graph_module",
                "_forward_from_src",
                f"{_PKG}.retrace_engine:forward_from_src",
                "compiled code memoised on source and globals",
                models=(FORWARD_FROM_SRC,),
            ),
            Patch(
                "retrace_engine.recompile",
                "torch.fx:GraphModule",
                "recompile",
                f"{_PKG}.retrace_engine:recompile",
                "code generated when first used (deferred)",
                models=(RECOMPILE,),
            ),
            Patch(
                "retrace_engine.reduce",
                "torch.fx:GraphModule",
                "__reduce__",
                f"{_PKG}.retrace_engine.deferred:reducer",
                "a deferred module's code is generated before it is pickled",
                wraps=True,
                models=(REDUCE,),
            ),
            Patch(
                "retrace_engine.reduce_package",
                "torch.fx:GraphModule",
                "__reduce_package__",
                f"{_PKG}.retrace_engine.deferred:reducer",
                "a deferred module's code is generated before it is packaged",
                wraps=True,
                models=(REDUCE_PACKAGE,),
            ),
        ),
    ),
    Group(
        name="stack_entry",
        layer="runtime",
        why="the Arm passes' caller stack entry formatted without the whole stack",
        independent=True,
        rows=tuple(
            Patch(
                f"stack_entry.{pin.module.rsplit('.', 1)[1]}",
                pin.module,
                "traceback",
                f"{_PKG}.retrace_engine.stack_entry:TRACEBACK",
                "its only use of traceback is format_stack()[-2]",
                models=(pin,),
                bound="traceback",
            )
            for pin in (ARM_PASS, ARM_PASS_UTILS)
        ),
    ),
    Group(
        name="collector",
        layer="runtime",
        why="no full garbage collection of the heap alive when a lowering starts",
        rows=(
            Patch(
                "collector.to_backend",
                "executorch.exir.program._program:EdgeProgramManager",
                "to_backend",
                f"{_PKG}.collector:scoped",
                "to_backend runs in the collector's scope",
                wraps=True,
            ),
        ),
    ),
    Group(
        name="edge.provenance",
        layer="runtime",
        why="provenance records share their ancestors instead of deep-copying them",
        rows=(
            Patch(
                "edge.provenance",
                "torch.fx.traceback:NodeSource",
                "__init__",
                f"{_PKG}.edge.provenance:sharing_init",
                "inside the edge stage a record holds its node's chain, shallow-copied",
                wraps=True,
                models=(NODE_SOURCE,),
            ),
        ),
    ),
    Group(
        name="edge.fake_memo",
        layer="runtime",
        why="quantize/dequantize fake values served from a memo inside the decompositions",
        rows=(
            Patch(
                "edge.fake_memo",
                "torch._subclasses.fake_tensor:FakeTensorMode",
                "dispatch",
                f"{_PKG}.retrace_engine.fake_memo:memo_dispatch",
                "pure fake kernels served from the mode's memo",
                wraps=True,
                models=(FAKE_DISPATCH,),
            ),
        ),
    ),
    Group(
        name="edge.cia_ops",
        layer="edge",
        why="one materialization of the C++ CIA ops per collection",
        rows=(
            *(
                Patch(
                    f"edge.cia_ops.collect.{module.rsplit('.', 1)[1]}",
                    module,
                    "_collect_all_valid_cia_ops",
                    f"{_PKG}.edge.cia_ops:collection",
                    "a collection materializes once",
                    wraps=True,
                    models=CIA_OPS_SOURCES,
                    bound=COLLECT_CIA_OPS.ref,
                )
                for module in (
                    "torch._export.utils",
                    "torch.export.exported_program",
                    "torch.export.decomp_utils",
                )
            ),
            Patch(
                "edge.cia_ops.materialize",
                "torch._export.utils",
                "_materialize_cpp_cia_ops",
                f"{_PKG}.edge.cia_ops:materialization",
                "later materializations of a collection return at once",
                wraps=True,
                models=CIA_OPS_SOURCES,
            ),
        ),
    ),
    Group(
        name="edge.cia_override",
        layer="edge",
        why="the CIA override of each decomposition call without its decorators",
        check=f"{_PKG}.edge.cia_override:install_check",
        rows=(
            Patch(
                "edge.cia_override",
                "torch.export.exported_program",
                "_override_composite_implicit_decomp",
                f"{_PKG}.edge.cia_override:override",
                "the same writes as stock's decorators, without building their wrappers",
                wraps=True,
                models=CIA_OVERRIDE_SOURCES,
            ),
        ),
    ),
    Group(
        name="edge.param_meta",
        layer="edge",
        why="the param/buffer metadata write-back reads the signature's mappings once",
        rows=(
            Patch(
                "edge.param_meta",
                "torch.export.exported_program",
                "_populate_param_buffer_metadata_to_new_gm",
                f"{_PKG}.edge.param_meta:dispatching",
                "the same writes in the same order, mappings built once",
                wraps=True,
                models=(POPULATE_PARAM_META,),
                bound=POPULATE_PARAM_META.ref,
            ),
        ),
    ),
    Group(
        name="verifier.dtype_check",
        layer="edge",
        why="the edge dialect's dtype check (a fake run of the whole graph) once per graph",
        torch=("2.13",),
        rows=(
            Patch(
                "verifier.dtype_check",
                "executorch.exir.verification.verifier",
                "_check_tensor_args_matching_op_allowed_dtype",
                f"{_PKG}.edge.dtype_check:checking",
                "a graph whose key passed in this lowering is not run again",
                wraps=True,
                models=EDGE_DTYPE_CHECK_SOURCES,
            ),
            Patch(
                "verifier.dtype_check.validator",
                "executorch.exir.verification.verifier",
                "EdgeOpArgValidator",
                f"{_PKG}.edge.dtype_check:validator",
                "an operator call run before in this lowering's checks is answered",
                wraps=True,
                models=EDGE_DTYPE_CHECK_SOURCES,
                bound="executorch.exir.verification.arg_validator:EdgeOpArgValidator",
            ),
        ),
    ),
    Group(
        name="edge.decompositions",
        layer="edge",
        why="the edge stage's decomposition calls 1 and 2 replayed",
        torch=("2.13",),
        rows=(
            Patch(
                "edge.decompositions.stage",
                "executorch.exir.program._program",
                "_gen_edge_manager_for_partitioners",
                f"{_PKG}.edge.decompositions:stage",
                "the edge stage's scope: its decomposition calls are counted and replayed",
                wraps=True,
            ),
            Patch(
                "edge.decompositions.run",
                "torch.export.exported_program:ExportedProgram",
                "run_decompositions",
                f"{_PKG}.edge.decompositions:decomposition_call",
                "a call whose result is provably the replay's is replayed",
                wraps=True,
            ),
        ),
    ),
)

# ---------------------------------------------------------------- models consulted at run time
MODELS: tuple[Model, ...] = (
    Model(
        "exir.scalar_to_tensor",
        "ScalarToTensorPass.call_operator rebuilds every call unchanged where it runs in place",
        (
            Pin(
                "executorch.exir.passes.scalar_to_tensor_pass:ScalarToTensorPass.call_operator",
                _same("acecfcdbda6f6dbb", *ET),
            ),
        ),
    ),
    Model(
        "exir.sym_to_tensor",
        "SymToTensorPass.call_operator rebuilds every call unchanged where it runs in place",
        (
            Pin(
                "executorch.exir.passes.sym_to_tensor_pass:SymToTensorPass.call_operator",
                _same("4bfe6e5ab93ebdd2", *ET),
            ),
        ),
    ),
    Model(
        "arm.quantized_op_value",
        "ArmPass's quantized bmm/leaky_relu value: an empty tensor in the output's dtype",
        (
            Pin(
                "executorch.backends.arm._passes.arm_pass"
                ":ArmPass._call_quantized_op_without_fake_kernel",
                _same("67eb1c85a1d8bd91", *ET),
            ),
        ),
    ),
    Model(
        "aten.conv2d_kernel",
        "conv2d's C++ CompositeImplicitAutograd kernel calls convolution once",
        (Pin("aten::conv2d (C++ conv2d_symint)", torch=("2.13",)),),
    ),
)


def group(name: str) -> Group:
    for g in GROUPS:
        if g.name == name:
            return g
    raise KeyError(name)


def model(name: str) -> Model:
    for m in MODELS:
        if m.name == name:
            return m
    raise KeyError(name)


__all__ = ["EXECUTORCH_VERSIONS", "GROUPS", "MODELS", "TORCH_VERSIONS", "group", "model"]
