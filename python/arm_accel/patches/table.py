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
#: The tracer's node meta the in-place re-trace writes (``eager_input_vals``).
PYTHON_KEY_CREATE_NODE = Pin(
    "torch.fx.experimental.proxy_tensor:PythonKeyTracer.create_node",
    # 2.14.0: is_fake_tensor for isinstance(FakeTensor)
    {"2.13.0": "d133105ae984ef0f", "2.14.0": "2d69df5073a536e6", "2.15.0": "2d69df5073a536e6"},
)
SAVE_EAGER_INPUT_VALS = Pin(
    "torch.fx.experimental.proxy_tensor:_should_save_eager_input_vals",
    _same("698724c4925a62a5", *ALL_TORCH),
)
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
PYTHON_CODE = Pin(
    "torch.fx.graph:Graph.python_code",
    # 2.14.0: a comment
    {"2.13.0": "a18c22f227f05adf", "2.14.0": "08f6f43ee67de5ea", "2.15.0": "08f6f43ee67de5ea"},
)
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
    # 2.14.0: is_fake_tensor() for isinstance(FakeTensor): the same on the fake values it reads
    {"2.13.0": "5bba6f4a70059917", "2.14.0": "a4924e4fde4d617e", "2.15.0": "a4924e4fde4d617e"},
)
NODE_SOURCE = Pin("torch.fx.traceback:NodeSource", _same("0e29c3d55d6345c3", "2.13.0", "2.14.0"))
#: ``NodeSource.__init__`` builds ``node_info`` from the node's name, ``str(target)`` and
#: ``id(node.graph)``, which ``identity.naming_init`` redoes with the graph's identity
NODE_SOURCE_INIT = Pin(
    "torch.fx.traceback:NodeSource.__init__",
    # 2.15.0 shares the ancestor records itself; node_info is built as before
    {"2.13.0": "99395e7f40a4a049", "2.14.0": "99395e7f40a4a049", "2.15.0": "d21b0c932373c74c"},
)
#: 2.15.0's constructor shares the chain's records itself (``list(node.meta["from_node"])``)
NODE_SOURCE_SHARES = Pin("torch.fx.traceback:NodeSource.__init__", {"2.15.0": "d21b0c932373c74c"})
#: ``torch.export.export``'s trace, and the program it returns (whose modules leave the call).
EXPORT_SOURCES = (
    Pin(
        "torch.export._trace:_export_for_training",
        # 2.14.0: accepts ShapesSpec / ParamsSpec dynamic shapes; returns the program as before
        {"2.13.0": "7cb1567a9c117c76", "2.14.0": "e96e98476c669956", "2.15.0": "e96e98476c669956"},
    ),
    Pin(
        "torch.export.exported_program:ExportedProgram.__init__",
        _same("f12b896c54172571", *ALL_TORCH),
    ),
)
#: dynamo's list of a traced GraphModule's metas: rebuilt per proxy by ``_create_proxy`` (its
#: ``_cur_code`` set to None in ``__init__`` and never assigned), read by
#: ``_maybe_preserve_original_meta``, found through the code's context.
_OUTPUT_GRAPH = "torch._dynamo.output_graph:SubgraphTracer"
DYNAMO_META_SOURCES = (
    Pin(f"{_OUTPUT_GRAPH}._create_proxy", _same("2197eaa85503a736", *ALL_TORCH)),
    Pin(
        f"{_OUTPUT_GRAPH}._maybe_preserve_original_meta",
        _same("6a1bd5c1bea9d9dd", *ALL_TORCH),
    ),
    Pin(
        f"{_OUTPUT_GRAPH}.__init__",
        # 2.15.0: one more attribute (a device-index variable); _cur_code set to None as before
        {"2.13.0": "73d9c6d8153e9b1e", "2.14.0": "73d9c6d8153e9b1e", "2.15.0": "6066e6e3c3eccf75"},
    ),
    Pin(
        "torch._dynamo.code_context:CodeContextDict.get_context",
        # 2.15.0: type annotations only
        {"2.13.0": "b4d912ffc2840a7a", "2.14.0": "b4d912ffc2840a7a", "2.15.0": "4190684adfec4550"},
    ),
)
#: dynamo's proxy creation (the branch composing the location header for the ``trace_call``
#: log) and what composing the header calls (``funcname_cache``: a per-file memo).
_FUNCNAME = "torch._dynamo.funcname_cache"
DYNAMO_HEADER_SOURCES = (
    Pin(f"{_OUTPUT_GRAPH}._create_proxy", _same("2197eaa85503a736", *ALL_TORCH)),
    Pin(
        "torch._dynamo.symbolic_convert:InstructionTranslatorBase.get_line_of_code_header",
        _same("27e39dc04c69ac96", *ALL_TORCH),
    ),
    Pin(f"{_FUNCNAME}:get_funcname", _same("df4db2aaec44b950", *ALL_TORCH)),
    Pin(f"{_FUNCNAME}:_add_file", _same("9a9bc965bc502bcc", *ALL_TORCH)),
)
#: dynamo's guard CSE (``PyExprCSEPass``, its only ``_ast_unparse`` caller) and the stdlib
#: unparser whose writing of expressions ``runtime/guard_cse.py`` composes (Python 3.11.7).
_GUARDS = "torch._dynamo.guards"
GUARD_CSE_SOURCES = (
    Pin(f"{_GUARDS}:PyExprCSEPass", _same("fc278c4377c1786c", *ALL_TORCH)),
    Pin(f"{_GUARDS}:_ast_unparse", _same("73472676746f1e63", *ALL_TORCH)),
    Pin("ast:_Unparser", {"3.11.7": "ddad66eed240d618"}),
    Pin("ast:unparse", {"3.11.7": "0494b7456bc1b70c"}),
    Pin("ast:_Precedence", {"3.11.7": "9f57189862e13cc4"}),
    Pin("ast:NodeVisitor", {"3.11.7": "dce9733d4e580e9e"}),
)
_DELEGATE = "torch._higher_order_ops.executorch_call_delegate"
#: A delegate's fake outputs: the unlifted program's module, run and dropped (``call_delegate_cpu``,
#: looked up by name by the fake and tracing dispatches; ``module()`` builds a new module).
DELEGATE_CALL_SOURCES = (
    Pin(f"{_DELEGATE}:call_delegate_cpu", _same("4e7ab5016a0073bc", *ALL_TORCH)),
    Pin(f"{_DELEGATE}:call_delegate_fake_tensor_mode", _same("d692c8ae03197911", *ALL_TORCH)),
    Pin(f"{_DELEGATE}:trace_call_delegate", _same("7955488b30b5f674", *ALL_TORCH)),
    Pin(
        "torch.export.exported_program:ExportedProgram.module",
        _same("474eddce075ef678", *ALL_TORCH),
    ),
    Pin(
        "torch.export._unlift:_unlift_exported_program_lifted_states",
        _same("d9c544b92940534a", *ALL_TORCH),
    ),
)
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
    Pin(
        "torch._export.utils:_check_valid_to_preserve",
        # 2.14.0: a return annotation
        {"2.13.0": "a225772212a823aa", "2.14.0": "7f73a8adc723629a", "2.15.0": "7f73a8adc723629a"},
    ),
    Pin("torch._export.utils:_is_cia_op", _same("4588c37719fb8356", *ALL_TORCH)),
)
#: 2.14.0 also registers the rule with the C++ fake dispatch (model ``torch.fake_registration``)
REGISTER_OP_IMPL = Pin(
    "torch._subclasses.fake_impls:register_op_impl",
    {"2.13.0": "405e93300718a185", "2.14.0": "6c0b0bcd047f8a6f", "2.15.0": "6c0b0bcd047f8a6f"},
)
CIA_OVERRIDE_SOURCES = (
    Pin(
        "torch.export.exported_program:_override_composite_implicit_decomp",
        # 2.14.0: a comment's spelling
        {"2.13.0": "4422dc79d0792af7", "2.14.0": "e96e2a4f053f0684", "2.15.0": "e96e2a4f053f0684"},
    ),
    Pin("torch._ops:OperatorBase.py_impl", _same("8173bd205b783783", *ALL_TORCH)),
    REGISTER_OP_IMPL,
    Pin(
        "torch._subclasses.fake_impls:_is_op_registered_to_fake_rule",
        _same("b42b78458191b7ee", *ALL_TORCH),
    ),
)
POPULATE_PARAM_META = Pin(
    "torch._export.utils:_populate_param_buffer_metadata_to_new_gm",
    {"2.13.0": "89e75119b33fa818"},
)
#: 2.14.0's write-back reads each signature mapping once itself
POPULATE_READS_ONCE = Pin(
    "torch._export.utils:_populate_param_buffer_metadata_to_new_gm",
    _same("94147610844e8976", "2.14.0", "2.15.0"),
)
DECOMPOSE_PROGRAM = Pin(
    "torch.export.exported_program:_decompose_exported_program",
    {"2.13.0": "1949ba42c1237735", "2.14.0": "da5abd41c5a7decd", "2.15.0": "da5abd41c5a7decd"},
)
GEN_PYTHON_CODE = Pin(
    "torch.fx.graph:CodeGen._gen_python_code",
    # 2.14.0 reads meta["autograd_backward"] and meta["boxed_arg_indices"] too; 2.15.0: sparse
    # layout annotations
    {"2.13.0": "9e367ac7bd7b936d", "2.14.0": "fb7a28207ddb8639", "2.15.0": "a9a0dee20db01b88"},
)

# torchao 0.18 (the pt2e HistogramObserver the Arm quantizers use)
TA = ("0.18.0",)
_OBSERVER = "torchao.quantization.pt2e.observer:HistogramObserver"
PARAM_SEARCH = Pin(f"{_OBSERVER}._non_linear_param_search", _same("9306a687ba73a304", *TA))
QUANTIZATION_ERROR = Pin(f"{_OBSERVER}._compute_quantization_error", _same("7521b64266ceb072", *TA))
GET_NORM = Pin(f"{_OBSERVER}._get_norm", _same("5a53c08e204e3608", *TA))
OBSERVER_FORWARD = Pin(f"{_OBSERVER}.forward", _same("5710caa9803a4da6", *TA))
UPSCALE_HISTOGRAM = Pin(f"{_OBSERVER}._upscale_histogram", _same("cad59b3e62afee79", *TA))
RESET_HISTOGRAM = Pin(f"{_OBSERVER}.reset_histogram", _same("821ee6fe6f4fcf4c", *TA))
_PER_CHANNEL = "torchao.quantization.pt2e.observer:PerChannelMinMaxObserver"
PER_CHANNEL_FORWARD = Pin(f"{_PER_CHANNEL}._forward", _same("bbacf9cd13555533", *TA))
ANNOTATION_PIPELINE = Pin(
    "executorch.backends.arm._passes.arm_pass_manager"
    ":ArmPassManager.transform_for_annotation_pipeline",
    _same("1886bcf3e3299b5f", *ET),
)
# The fresh attribute names of the quantization flow (prepare's observers, convert's and the
# Arm passes' constants): the name search and the attribute lookup its hasattr runs
_FX_UTILS = "torch.ao.quantization.fx.utils"
_PT2E_UTILS = "torchao.quantization.pt2e.utils"
ATTR_NAMES_FX = Pin(
    f"{_FX_UTILS}:get_new_attr_name_with_prefix", _same("1b607f727ed24eca", *ALL_TORCH)
)
ATTR_NAMES_PT2E = Pin(
    f"{_PT2E_UTILS}:get_new_attr_name_with_prefix", _same("1b607f727ed24eca", *TA)
)
MODULE_GETATTR = Pin(
    "torch.nn.modules.module:Module.__getattr__", _same("fe51052b67121828", *ALL_TORCH)
)
# C++ kernels the quantization layer models (read on torch 2.13; fuzzed on 2.13, 2.14.0, 2.15.0)
FLOAT32_COMPARE = Pin(
    "aten::lt/gt of a float32 tensor and a Python float (type promotion: float32)",
    torch=TORCH_VERSIONS,
)
HISTC_KERNEL = Pin(
    "aten::histc (C++ histogramdd_cpu_contiguous, linear interpolation)", torch=TORCH_VERSIONS
)
ELEMENTWISE_KERNELS = Pin(
    "aten float32 add/sub/mul/div, div(rounding_mode='floor'), clamp (C++ BinaryOpsKernel)",
    torch=TORCH_VERSIONS,
)
SUM_CUMSUM_KERNELS = Pin(
    "aten::sum (C++ cascade_sum, float32 accumulators; width probed at run time), "
    "aten::cumsum (C++ cumsum_cpu_kernel, double accumulator)",
    torch=TORCH_VERSIONS,
)
BUCKETIZE_BINCOUNT = Pin(
    "aten::bucketize (C++ cus_upper_bound), aten::bincount (serial, float weights)",
    torch=TORCH_VERSIONS,
)
MIN_MAX_KERNELS = Pin(
    "aten::aminmax (dim), aten::minimum/maximum of float32: exact but for NaN and signed zeros",
    torch=TORCH_VERSIONS,
)
#: prepare_pt2e's and convert_pt2e's module: the callees they look up by name
_QUANTIZE_PT2E = "torchao.quantization.pt2e.quantize_pt2e"
# convert_pt2e's constant fold: what happens to a dequantize node's value
_FOLDER = "torchao.quantization.pt2e.constant_fold:ConstantFolder"
_DECOMPOSED = "torch.ao.quantization.fx._decomposed"
DEQUANTIZE_PER_TENSOR = Pin(
    f"{_DECOMPOSED}:dequantize_per_tensor", _same("d563a7b818023eb9", *ALL_TORCH)
)
QMIN_QMAX_CHECK = Pin(
    f"{_DECOMPOSED}:_quant_min_max_bounds_check", _same("c5455a8dbc26d28c", *ALL_TORCH)
)
QUANTIZE_PER_TENSOR = Pin(
    f"{_DECOMPOSED}:quantize_per_tensor", _same("051217e18a306283", *ALL_TORCH)
)
QUANTIZE_KERNELS = Pin(
    "aten float32 mul and add by a Python scalar or a float32 tensor (scalars cast to "
    "float32), round (half to even), clamp by int scalars, the cast of an integral float32 "
    "to int8/uint8/int16",
    torch=TORCH_VERSIONS,
)
CONSTANT_FOLDER = (
    Pin(f"{_FOLDER}.run_node", _same("ec1be9e539d2e207", *TA)),
    Pin(f"{_FOLDER}.is_impure", _same("e3dea6d69765a89c", *TA)),
    Pin(f"{_FOLDER}._deduce_value", _same("0d56b42a7ce57088", *TA)),
    Pin("torch.fx.interpreter:Interpreter.run_node", _same("c364ef1c145a2a3d", *ALL_TORCH)),
    Pin("torch.fx.interpreter:Interpreter.call_function", _same("fb396d3a46b3242c", *ALL_TORCH)),
    Pin(f"{_DECOMPOSED}:dequantize_per_channel", _same("e25a90eea07056da", *ALL_TORCH)),
    DEQUANTIZE_PER_TENSOR,
    Pin(f"{_DECOMPOSED}:_permute_to_axis_zero", _same("c7cae75b8911c807", *ALL_TORCH)),
    QMIN_QMAX_CHECK,
    QUANTIZE_PER_TENSOR,
    Pin(f"{_DECOMPOSED}:quantize_per_channel", _same("3f2494698a99462f", *ALL_TORCH)),
    QUANTIZE_KERNELS,
)
# The Arm passes' quantization helpers on constant tensors
_QUANT_ARGS = "executorch.backends.arm._passes.quant_args:QuantArgs"
EDGE_OP_CALL = Pin(
    "executorch.exir.dialects.edge._ops:EdgeOpOverload.__call__", _same("e72d6e1844bdf4f7", *ET)
)
QUANTIZE_VALUE = (
    Pin(f"{_QUANT_ARGS}.quantize_value", _same("fff6f57e85f0a027", *ET)),
    EDGE_OP_CALL,
    QUANTIZE_PER_TENSOR,
    QMIN_QMAX_CHECK,
    QUANTIZE_KERNELS,
)
DEQUANTIZE_VALUE = (
    Pin(f"{_QUANT_ARGS}.dequantize_value", _same("5230a5dc11e1d061", *ET)),
    EDGE_OP_CALL,
    DEQUANTIZE_PER_TENSOR,
    QMIN_QMAX_CHECK,
    Pin(
        "aten elementwise kernels: an element's value depends on that element alone",
        torch=TORCH_VERSIONS,
    ),
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
    # 2.14.0 also finds the mode of fake tensors wrapped in subclasses; the key declines every
    # input that is not exactly a FakeTensor, whose mode both versions read alike
    Pin(
        "torch._guards:detect_fake_mode",
        {"2.13.0": "29c2e083e96d8f1f", "2.14.0": "622f145cad2238a0", "2.15.0": "622f145cad2238a0"},
    ),
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
                f"{_PKG}.pipeline.passes.canonicalize:CanonicalizeViewCopyPermutePass",
                "chains of view/permute copies collected in Rust",
                _pass_modules(
                    ("canonicalize_view_copy_permute_pass", "55b4dc2ebbe1353a"),
                    ("canonicalize_view_copy_permute_pass", "fc548f564c9846b6"),
                ),
            ),
            ClassSwap(
                "FuseDuplicateUsersPass",
                f"{_PKG}.pipeline.passes.fuse_duplicate_users:FuseDuplicateUsersPass",
                "duplicate users screened in Rust",
                _pass_modules(
                    ("fuse_duplicate_users_pass", "d5bb5bf4c3d4ae98"),
                    ("fuse_duplicate_users_pass", "2857b71e833c994a"),
                ),
            ),
            ClassSwap(
                "RemovePermutesAroundElementwiseTosaOps",
                f"{_PKG}.pipeline.passes.remove_permutes_around_elementwise"
                ":RemovePermutesAroundElementwiseTosaOps",
                "the elementwise operator set as a constant bitset in Rust",
                _pass_modules(
                    ("remove_permutes_around_elementwise_tosa_ops", "88fe1cf799f6aeda"),
                    ("remove_permutes_around_elementwise_ops", "51b61024f7404c8a"),
                ),
            ),
            ClassSwap(
                "FuseIdenticalInputTransformsPass",
                f"{_PKG}.pipeline.passes.fuse_identical_input_transforms:FuseIdenticalInputTransformsPass",
                "identical input transforms found in one table walk",
                _pass_modules(
                    ("fuse_identical_input_transforms_pass", "9931350b1b42cc81"),
                    ("fuse_identical_input_transforms_pass", "ca06f8b3241613a8"),
                ),
            ),
            ClassSwap(
                "PropagateViewCopyPermuteDownPass",
                f"{_PKG}.pipeline.passes.propagate.accelerated:PropagateViewCopyPermuteDownPass",
                "every scan planned in Rust to the fixed point, the re-traces between modelled",
                _pass_modules(
                    ("propagate_view_copy_permute_pass", "7a2fcbcb4d7a2af3"),
                    ("propagate_view_copy_permute_pass", "2022dd12453cfe38"),
                ),
            ),
            ClassSwap(
                "PropagateViewCopyPermuteUpPass",
                f"{_PKG}.pipeline.passes.propagate.accelerated:PropagateViewCopyPermuteUpPass",
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
        torch=TORCH_VERSIONS,
        rows=(
            Patch(
                "retrace_engine.call",
                "executorch.exir.pass_base:_ExportPassBase",
                "call",
                f"{_PKG}.pipeline.engine:accelerated_call",
                "the re-trace in place (stock re-trace on decline)",
                models=(EXIR_PASS_BASE, PYTHON_KEY_CREATE_NODE, SAVE_EAGER_INPUT_VALS),
            ),
            Patch(
                "retrace_engine.deprecated_call",
                "torch._export.pass_base:_ExportPassBaseDeprecatedDoNotUse",
                "call",
                f"{_PKG}.pipeline.engine:deprecated_base_call",
                "records ReplaceViewOpsWithViewCopyOpsPass's values as fresh",
                models=(DEPRECATED_BASE_CALL,),
            ),
            Patch(
                "retrace_engine.transform",
                "executorch.backends.arm._passes.arm_pass_manager:ArmPassManager",
                "_transform",
                f"{_PKG}.pipeline.engine:transform",
                "the Arm pipeline's scope: its re-traces run in place",
            ),
            Patch(
                "retrace_engine.generate_edge_program",
                "executorch.exir.program._program",
                "_generate_edge_program",
                f"{_PKG}.pipeline.engine:generate_edge_program",
                "to_edge's own ExportPass passes run in place",
            ),
            Patch(
                "retrace_engine.python_code",
                "torch.fx:Graph",
                "python_code",
                f"{_PKG}.pipeline.engine:python_code",
                "generated code memoised on what it is made of",
                models=(PYTHON_CODE,),
            ),
            Patch(
                "retrace_engine.forward_from_src",
                "torch.fx.graph_module",
                "_forward_from_src",
                f"{_PKG}.pipeline.engine:forward_from_src",
                "compiled code memoised on source and globals",
                models=(FORWARD_FROM_SRC,),
            ),
            Patch(
                "retrace_engine.recompile",
                "torch.fx:GraphModule",
                "recompile",
                f"{_PKG}.pipeline.engine:recompile",
                "code generated when first used (deferred)",
                models=(RECOMPILE,),
            ),
            Patch(
                "retrace_engine.reduce",
                "torch.fx:GraphModule",
                "__reduce__",
                f"{_PKG}.runtime.deferred:reducer",
                "a deferred module's code is generated before it is pickled",
                wraps=True,
                models=(REDUCE,),
            ),
            Patch(
                "retrace_engine.identity",
                "torch.fx.traceback:NodeSource",
                "__init__",
                f"{_PKG}.runtime.identity:naming_init",
                "a record made from a re-traced graph's node names the graph stock's re-trace "
                "built",
                wraps=True,
                models=(NODE_SOURCE_INIT,),
            ),
            Patch(
                "retrace_engine.reduce_package",
                "torch.fx:GraphModule",
                "__reduce_package__",
                f"{_PKG}.runtime.deferred:reducer",
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
                f"{_PKG}.runtime.stack_entry:TRACEBACK",
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
        why="no full garbage collection of the heap alive when a lowering, torch.export or "
        "to_executorch starts",
        rows=(
            Patch(
                "collector.to_backend",
                "executorch.exir.program._program:EdgeProgramManager",
                "to_backend",
                f"{_PKG}.runtime.collector:scoped",
                "to_backend runs in the collector's scope",
                wraps=True,
            ),
            Patch(
                "collector.export",
                "torch.export._trace",
                "_export",
                f"{_PKG}.runtime.collector:collecting",
                "torch.export runs in the collector's scope",
                wraps=True,
            ),
            Patch(
                "collector.to_executorch",
                "executorch.exir.program._program:EdgeProgramManager",
                "to_executorch",
                f"{_PKG}.runtime.collector:collecting",
                "to_executorch runs in the collector's scope",
                wraps=True,
            ),
        ),
    ),
    Group(
        name="collector.quantize",
        layer="runtime",
        why="no full garbage collection of the heap alive when a step of the quantization "
        "flow starts",
        independent=True,
        rows=(
            Patch(
                "collector.quantize.prepare",
                _QUANTIZE_PT2E,
                "prepare",
                f"{_PKG}.runtime.collector:collecting",
                "prepare_pt2e's observer insertion runs in the collector's scope",
                wraps=True,
                bound="torchao.quantization.pt2e.prepare:prepare",
            ),
        ),
    ),
    Group(
        name="quantize.convert",
        layer="quantize",
        why="convert_pt2e's five recompiles deferred to first use (only the last code runs); "
        "its conversion and constant fold in the collector's scope",
        independent=True,
        rows=(
            *(
                Patch(
                    f"quantize.convert.{name.strip('_')}",
                    _QUANTIZE_PT2E,
                    name,
                    f"{_PKG}.quantize.convert:converting",
                    f"{what}: recompiles deferred, in the collector's scope",
                    wraps=True,
                    bound=origin,
                )
                for name, origin, what in (
                    (
                        "_convert_to_reference_decomposed_fx",
                        "torchao.quantization.pt2e.convert:_convert_to_reference_decomposed_fx",
                        "convert_pt2e's conversion",
                    ),
                    (
                        "constant_fold",
                        "torchao.quantization.pt2e.constant_fold:constant_fold",
                        "convert_pt2e's constant fold",
                    ),
                )
            ),
            Patch(
                "quantize.convert.pass_manager",
                _QUANTIZE_PT2E,
                "PassManager",
                f"{_PKG}.quantize.convert:DeferringPassManager",
                "convert_pt2e's PassManager runs: the recompile after each pass deferred",
                bound="torch.fx.passes.infra.pass_manager:PassManager",
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
                f"{_PKG}.runtime.provenance:sharing_init",
                "inside the edge stage a record holds its node's chain, shallow-copied",
                wraps=True,
                models=(NODE_SOURCE,),
                stock_suffices=(NODE_SOURCE_SHARES,),
            ),
        ),
    ),
    Group(
        name="delegate.unlifted",
        layer="pipeline",
        why="the module a delegate call unlifts for its fake outputs, run once and dropped: "
        "records sharing their ancestors, code generated once, the fake memo",
        rows=(
            Patch(
                "delegate.unlifted",
                "torch._higher_order_ops.executorch_call_delegate",
                "call_delegate_cpu",
                f"{_PKG}.pipeline.scoped_calls:delegate_call",
                "the fake and tracing dispatches' unlifted module shares its records' "
                "ancestors, generates its code when it runs and runs with the fake memo",
                wraps=True,
                models=DELEGATE_CALL_SOURCES,
            ),
        ),
    ),
    Group(
        name="export.scoped",
        layer="pipeline",
        why="torch.export's traces: records sharing their ancestors, code generated once, "
        "the fake memo",
        rows=(
            Patch(
                "export.scoped",
                "torch.export._trace",
                "_export_for_training",
                f"{_PKG}.pipeline.scoped_calls:export_call",
                "the export's traces share their records' ancestors, generate each module's "
                "code when used (the program's before it returns) and run with the fake memo",
                wraps=True,
                models=EXPORT_SOURCES,
            ),
        ),
    ),
    Group(
        name="export.dynamo_meta",
        layer="runtime",
        why="inside torch.export, dynamo lists a traced GraphModule's metas once, not per node",
        rows=(
            Patch(
                "export.dynamo_meta",
                _OUTPUT_GRAPH,
                "_create_proxy",
                f"{_PKG}.runtime.dynamo_meta:create_proxy",
                "inside torch.export a proxy skips the rebuild of the original graph's metas "
                "list when everything the rebuild reads is what it read last",
                wraps=True,
                models=DYNAMO_META_SOURCES,
            ),
        ),
    ),
    Group(
        name="export.dynamo_header",
        layer="runtime",
        why="inside torch.export, dynamo composes a proxy's location header only for a log "
        "that reads it",
        rows=(
            Patch(
                "export.dynamo_header",
                _OUTPUT_GRAPH,
                "_create_proxy",
                f"{_PKG}.runtime.dynamo_header:create_proxy",
                "inside torch.export, with the trace_call log off, a call proxy's instruction "
                "is marked as the one whose header was composed (stock's branch then composes "
                "none: the header's only reader is that log)",
                wraps=True,
                models=DYNAMO_HEADER_SOURCES,
            ),
        ),
    ),
    Group(
        name="export.guard_cse",
        layer="runtime",
        why="dynamo's guard CSE composes each sub-expression's text once, not per ancestor",
        rows=(
            Patch(
                "export.guard_cse.unparse",
                _GUARDS,
                "_ast_unparse",
                f"{_PKG}.runtime.guard_cse:unparse",
                "inside the CSE pass, the first text asked of an expression node is composed "
                "from its children's texts as ast's unparser writes them",
                wraps=True,
                models=GUARD_CSE_SOURCES,
            ),
            *(
                Patch(
                    f"export.guard_cse.{method}",
                    f"{_GUARDS}:PyExprCSEPass",
                    method,
                    f"{_PKG}.runtime.guard_cse:scoped",
                    f"the CSE pass's {method} runs with its own composed texts",
                    wraps=True,
                    models=GUARD_CSE_SOURCES,
                )
                for method in ("count", "replace")
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
                f"{_PKG}.runtime.fake_memo:memo_dispatch",
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
                stock_suffices=(POPULATE_READS_ONCE,),
                bound=POPULATE_PARAM_META.ref,
            ),
        ),
    ),
    Group(
        name="verifier.dtype_check",
        layer="edge",
        why="the edge dialect's dtype check (a fake run of the whole graph) once per graph",
        torch=TORCH_VERSIONS,
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
        why="the edge stage's decomposition calls replayed",
        torch=TORCH_VERSIONS,
        rows=(
            Patch(
                "edge.decompositions.export_outputs",
                "torch.export._trace",
                "_export",
                f"{_PKG}.edge.export_outputs:recording",
                "the programs torch.export returns are remembered: call 0 replays only those",
                wraps=True,
            ),
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
    Group(
        name="quantize.search",
        layer="quantize",
        why="convert_pt2e's HistogramObserver parameter search: its bound walk in Rust",
        check=f"{_PKG}.quantize.histogram:install_check",
        rows=(
            Patch(
                "quantize.histogram_search",
                _OBSERVER,
                "_non_linear_param_search",
                f"{_PKG}.quantize.histogram:dispatching",
                "the whole search in one native call where modelled; else the walk between "
                "candidates native, each candidate's error and the stop stock's",
                wraps=True,
                models=(PARAM_SEARCH, FLOAT32_COMPARE, SUM_CUMSUM_KERNELS),
            ),
        ),
    ),
    Group(
        name="quantize.observe",
        layer="quantize",
        why="calibration: HistogramObserver's histc and its histogram's re-bucketing in Rust",
        independent=True,
        rows=(
            Patch(
                "quantize.histogram_forward",
                _OBSERVER,
                "forward",
                f"{_PKG}.quantize.observe:forward",
                "a batch inside the range added natively; others stock's statements, histc native",
                wraps=True,
                models=(OBSERVER_FORWARD, HISTC_KERNEL),
            ),
            Patch(
                "quantize.histogram_upscale",
                _OBSERVER,
                "_upscale_histogram",
                f"{_PKG}.quantize.observe:upscale",
                "bucketize and bincount native; the linspace calls torch's",
                wraps=True,
                models=(UPSCALE_HISTOGRAM, BUCKETIZE_BINCOUNT),
            ),
        ),
    ),
    Group(
        name="quantize.per_channel",
        layer="quantize",
        why="calibration: PerChannelMinMaxObserver's per-channel extremes in Rust",
        independent=True,
        rows=(
            Patch(
                "quantize.per_channel_forward",
                _PER_CHANNEL,
                "_forward",
                f"{_PKG}.quantize.per_channel:forward",
                "a batch after the first, channel axis 0, reduced natively in the buffers",
                wraps=True,
                models=(PER_CHANNEL_FORWARD, MIN_MAX_KERNELS),
            ),
        ),
    ),
    Group(
        name="quantize.fold",
        layer="quantize",
        why="convert_pt2e's constant fold: weights quantized natively, the dequantized copies "
        "it discards not computed",
        rows=(
            Patch(
                "quantize.fold",
                _FOLDER,
                "_deduce_value",
                f"{_PKG}.quantize.fold:dispatching",
                "a dequantize node's value, which is_impure discards, checked on meta inputs "
                "and not computed; a folded weight quantization computed natively",
                wraps=True,
                models=CONSTANT_FOLDER,
            ),
        ),
    ),
    Group(
        name="quantize.qargs",
        layer="quantize",
        why="the Arm passes' per-tensor quantize/dequantize of constant tensors in Rust",
        independent=True,
        rows=(
            Patch(
                "quantize.qargs_quantize",
                _QUANT_ARGS,
                "quantize_value",
                f"{_PKG}.quantize.affine:quantizing",
                "quantize_per_tensor's float32 steps per element natively",
                wraps=True,
                models=QUANTIZE_VALUE,
            ),
            Patch(
                "quantize.qargs_dequantize",
                _QUANT_ARGS,
                "dequantize_value",
                f"{_PKG}.quantize.affine:dequantizing",
                "each code mapped through stock's dequantization of every code",
                wraps=True,
                models=DEQUANTIZE_VALUE,
            ),
        ),
    ),
    Group(
        name="quantize.annotation",
        layer="quantize",
        why="prepare_pt2e's Arm annotation pipeline in the re-trace engine's pipeline scope",
        torch=TORCH_VERSIONS,
        check=f"{_PKG}.quantize.annotation:install_check",
        rows=(
            Patch(
                "quantize.annotation_pipeline",
                "executorch.backends.arm._passes.arm_pass_manager:ArmPassManager",
                "transform_for_annotation_pipeline",
                f"{_PKG}.quantize.annotation:wrap",
                "its recompiles deferred and memoised as the pipeline's",
                wraps=True,
                models=(ANNOTATION_PIPELINE,),
            ),
        ),
    ),
    Group(
        name="quantize.attr_names",
        layer="quantize",
        why="the quantization flow's fresh attribute names found by dict lookups, not by a "
        "hasattr that raises for every name taken",
        independent=True,
        rows=(
            Patch(
                "quantize.attr_names.fx_prepare",
                "torch.ao.quantization.fx.prepare",
                "get_new_attr_name_with_prefix",
                f"{_PKG}.quantize.attr_names:names",
                "prepare_pt2e's observer names: each hasattr answered from the module's dicts",
                wraps=True,
                models=(ATTR_NAMES_FX, MODULE_GETATTR),
                bound=ATTR_NAMES_FX.ref,
            ),
            *(
                Patch(
                    f"quantize.attr_names.{module.rsplit('.', 1)[1]}",
                    module,
                    "get_new_attr_name_with_prefix",
                    f"{_PKG}.quantize.attr_names:names",
                    "the pass's constant names: each hasattr answered from the module's dicts",
                    wraps=True,
                    models=(ATTR_NAMES_PT2E, MODULE_GETATTR),
                    bound=ATTR_NAMES_PT2E.ref,
                )
                for module in (
                    "executorch.backends.arm._passes.scalars_to_attribute_pass",
                    "executorch.backends.arm._passes.deduplicate_get_attr_pass",
                )
            ),
            Patch(
                "quantize.attr_names.pt2e_utils",
                _PT2E_UTILS,
                "get_new_attr_name_with_prefix",
                f"{_PKG}.quantize.attr_names:names",
                "convert_pt2e's constant names (create_getattr_from_value): each hasattr "
                "answered from the module's dicts",
                wraps=True,
                models=(ATTR_NAMES_PT2E, MODULE_GETATTR),
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
        "torchao.histogram_error",
        "a HistogramObserver candidate's error: float32 terms computed natively, torch's sum",
        (QUANTIZATION_ERROR, GET_NORM, ELEMENTWISE_KERNELS),
    ),
    Model(
        "torchao.histogram_reset",
        "HistogramObserver.reset_histogram, inlined with a native histc for a first batch",
        (RESET_HISTOGRAM, HISTC_KERNEL),
    ),
    Model(
        "aten.conv2d_kernel",
        "conv2d's C++ CompositeImplicitAutograd kernel calls convolution once",
        # read on 2.13; traced to the same convolution on 2.14.0 and 2.15.0 (biased, unbiased,
        # strided, grouped, unbatched, integer, half, a bias of another dtype)
        (Pin("aten::conv2d (C++ conv2d_symint)", torch=TORCH_VERSIONS),),
    ),
)


MODELS += (
    Model(
        "torch.fake_registration",
        "register_op_impl's filing of a fake rule, which the CIA override repeats",
        (REGISTER_OP_IMPL,),
        variants={"2.13.0": "python", "2.14.0": "python and C++", "2.15.0": "python and C++"},
    ),
    Model(
        "torch.program_constants",
        "the constants dict of the program a decomposition call returns, which the replay builds",
        (DECOMPOSE_PROGRAM,),
        variants={"2.13.0": "the input's", "2.14.0": "a new dict", "2.15.0": "a new dict"},
    ),
    Model(
        "torch.code_generator",
        "what the code generator reads, which the codegen memo and deferred recompiles key on",
        (GEN_PYTHON_CODE,),
    ),
)


def group(name: str) -> Group:
    for g in GROUPS:
        if g.name == name:
            return g
    raise KeyError(name)


#: ``MODELS`` by name, for the ``MODELS`` it was built from (tests replace the tuple).
_by_name: tuple[tuple[Model, ...], dict[str, Model]] = ((), {})


def model(name: str) -> Model:
    global _by_name
    if _by_name[0] is not MODELS:
        _by_name = (MODELS, {m.name: m for m in reversed(MODELS)})
    return _by_name[1][name]


__all__ = ["EXECUTORCH_VERSIONS", "GROUPS", "MODELS", "TORCH_VERSIONS", "group", "model"]
