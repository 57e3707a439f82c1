"""Models built in code with seeded weights (no downloads) and the Arm/TOSA lowering used by
the demo, the benchmarks and the tests."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

DEFAULT_MODEL = "llama4"


@dataclass(frozen=True)
class ModelSpec:
    name: str
    build: Callable[[], tuple[torch.nn.Module, tuple[torch.Tensor, ...]]]
    mode: str  # "INT" or "FP"


def build_llama(
    n_layers: int, dim: int = 64, seq_len: int = 8, seed: int = 0
) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    """A llama-style transformer from executorch's examples with seeded random weights."""
    from executorch.examples.models.llama.llama_transformer import construct_transformer
    from executorch.examples.models.llama.model_args import ModelArgs

    torch.manual_seed(seed)
    args = ModelArgs(
        dim=dim,
        n_layers=n_layers,
        n_heads=4,
        vocab_size=128,
        hidden_dim=2 * dim,
        max_seq_len=seq_len,
        max_context_len=seq_len,
        use_kv_cache=False,
    )
    model = construct_transformer(args).eval()
    tokens = torch.randint(0, args.vocab_size, (1, seq_len))
    return model, (tokens,)


def build_mlperf(name: str, seed: int = 0) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    """One of the MLPerf Tiny models from executorch's examples, seeded."""
    from executorch.examples.models import mlperf_tiny

    torch.manual_seed(seed)
    wrapper = getattr(mlperf_tiny, name)()
    model = wrapper.get_eager_model()
    inputs = wrapper.get_example_inputs()
    return model, tuple(inputs)


class TransformerBlock(torch.nn.Module):
    """Multi-head attention + MLP written with explicit view/permute traffic."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)
        self.mlp = torch.nn.Sequential(
            torch.nn.Linear(dim, 2 * dim), torch.nn.GELU(), torch.nn.Linear(2 * dim, dim)
        )
        self.n1 = torch.nn.LayerNorm(dim)
        self.n2 = torch.nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        h = self.heads
        q, k, v = self.qkv(self.n1(x)).chunk(3, dim=-1)
        q = q.reshape(b, t, h, d // h).permute(0, 2, 1, 3)
        k = k.reshape(b, t, h, d // h).permute(0, 2, 3, 1)
        v = v.reshape(b, t, h, d // h).permute(0, 2, 1, 3)
        a = torch.softmax(q @ k / (d // h) ** 0.5, dim=-1) @ v
        x = x + self.proj(a.permute(0, 2, 1, 3).reshape(b, t, d))
        return x + self.mlp(self.n2(x))


def build_synthetic_transformer(
    blocks: int, dim: int = 32, seq_len: int = 8, seed: int = 0
) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(*[TransformerBlock(dim, 4) for _ in range(blocks)]).eval()
    return model, (torch.randn(1, seq_len, dim),)


def build_convnet(seed: int = 0) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(16, 16, 3, padding=1, groups=16),
        torch.nn.Conv2d(16, 32, 1),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(32, 10),
    ).eval()
    return model, (torch.randn(1, 3, 32, 32),)


# Small decoder LLMs from ``transformers`` configs: model type -> config overrides on
# top of HF_COMMON. Gemma-2's head_dim defaults to 256, so it is pinned to hidden / heads.
HF_FAMILIES: dict[str, dict[str, Any]] = {
    "qwen2": {},
    "llama": {},
    "phi3": {"pad_token_id": 0},
    "gemma2": {"head_dim": 16},
}
HF_COMMON: dict[str, Any] = {
    "vocab_size": 256,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
    "use_cache": False,
}


class CausalLMLogits(torch.nn.Module):
    """A ``transformers`` causal LM returning only its logits tensor, without a KV cache, so
    ``torch.export`` sees one tensor in and one out."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, use_cache=False).logits


def build_hf_decoder(
    family: str, seq_len: int = 16, seed: int = 0
) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    """A 2-layer ``transformers`` decoder of ``family`` (a key of :data:`HF_FAMILIES`) built
    with ``from_config`` (no hub access), seeded random weights, eager attention."""
    try:
        import transformers  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            f"the {family} zoo models need transformers: pip install 'arm-accel[bench]' "
            "(or pip install transformers; it does not reinstall torch)"
        ) from exc

    return build_hf_causal_lm(family, {**HF_COMMON, **HF_FAMILIES[family]}, seq_len, seed)


def build_hf_causal_lm(
    family: str, config: dict[str, Any], seq_len: int = 16, seed: int = 0
) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    """A ``transformers`` causal LM of model type ``family`` built with ``from_config`` from the
    ``config`` fields (no hub access), seeded random weights, eager attention, returning its
    logits for ``seq_len`` seeded random tokens."""
    from transformers import AutoConfig, AutoModelForCausalLM

    hf_config = AutoConfig.for_model(family, **config)
    hf_config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = CausalLMLogits(AutoModelForCausalLM.from_config(hf_config)).eval()
    tokens = torch.randint(0, hf_config.vocab_size, (1, seq_len))
    return model, (tokens,)


def _zoo() -> dict[str, ModelSpec]:
    zoo: dict[str, ModelSpec] = {}
    for name in ("DSCNNKWSModel", "ResNet8Model", "MobileNetV1025Model", "DeepAutoEncoderModel"):
        short = name.removesuffix("Model").lower()
        zoo[short] = ModelSpec(short, lambda name=name: build_mlperf(name), "INT")
    for layers in (1, 2, 4, 8, 16):
        zoo[f"llama{layers}"] = ModelSpec(f"llama{layers}", lambda n=layers: build_llama(n), "INT")
        zoo[f"llama{layers}-fp"] = ModelSpec(
            f"llama{layers}-fp", lambda n=layers: build_llama(n), "FP"
        )
    for blocks in (1, 2, 4, 8, 16, 32):
        zoo[f"transformer{blocks}"] = ModelSpec(
            f"transformer{blocks}", lambda n=blocks: build_synthetic_transformer(n), "FP"
        )
    zoo["convnet"] = ModelSpec("convnet", build_convnet, "FP")
    for family in HF_FAMILIES:
        short = "llama-hf" if family == "llama" else family
        build_family = lambda f=family: build_hf_decoder(f)  # noqa: E731
        zoo[f"{short}-2l"] = ModelSpec(f"{short}-2l", build_family, "INT")
        zoo[f"{short}-2l-fp"] = ModelSpec(f"{short}-2l-fp", build_family, "FP")
    return zoo


ZOO = _zoo()


# Lowering targets: bare TOSA (the default) or an Ethos-U NPU through Vela. Ethos-U targets are
# the accelerator configurations EthosUCompileSpec accepts (``ethos-u55-128``, ...); the CLI
# offers the two below.
TOSA = "tosa"
ETHOS_U_TARGETS = ("ethos-u55-128", "ethos-u85-256")
TARGETS = (TOSA, *ETHOS_U_TARGETS)


def is_ethos_u(target: str) -> bool:
    return target.lower().startswith("ethos-u")


def target_mode(target: str, mode: str) -> str:
    """The mode a model lowers in for ``target``: Ethos-U NPUs run integer models only, so a
    zoo model marked FP is quantized for them."""
    return "INT" if is_ethos_u(target) else mode


def compile_spec(mode: str, target: str = TOSA) -> Any:
    """TosaCompileSpec for ``tosa``; for an Ethos-U target, EthosUCompileSpec with its defaults
    (system config, memory mode and Vela flags chosen by executorch for that target)."""
    if is_ethos_u(target):
        if mode != "INT":
            raise ValueError(f"{target} lowers INT models only (got mode {mode!r})")
        from executorch.backends.arm.ethosu import EthosUCompileSpec

        return EthosUCompileSpec(target)
    if target != TOSA:
        raise ValueError(f"unknown target {target!r}; known: {', '.join(TARGETS)}")
    from executorch.backends.arm.tosa.compile_spec import TosaCompileSpec

    return TosaCompileSpec(f"TOSA-1.0+{mode}")


def quantizer(mode: str, target: str = TOSA) -> Any:
    """The quantizer executorch's Arm test pipelines use for ``target``, symmetric config."""
    from executorch.backends.arm.quantizer import (
        EthosUQuantizer,
        TOSAQuantizer,
        get_symmetric_quantization_config,
    )

    cls = EthosUQuantizer if is_ethos_u(target) else TOSAQuantizer
    q = cls(compile_spec(mode, target))
    q.set_global(get_symmetric_quantization_config())
    return q


class StageClock:
    """Adds each ``with clock("stage"):`` block's seconds to ``stages[stage]`` (no-op without
    a dict)."""

    def __init__(self, stages: dict[str, float] | None) -> None:
        self.stages = stages

    @contextmanager
    def __call__(self, stage: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            if self.stages is not None:
                self.stages[stage] = self.stages.get(stage, 0.0) + time.perf_counter() - start


def export_for_arm(
    model: torch.nn.Module,
    inputs: tuple[torch.Tensor, ...],
    mode: str,
    seed: int = 0,
    target: str = TOSA,
    calibration: list[tuple[torch.Tensor, ...]] | None = None,
    stages: dict[str, float] | None = None,
) -> Any:
    """torch.export the model; for INT, quantize it with the target's quantizer first
    (calibrated on ``calibration``, default the example inputs) and export the result.
    ``stages``: filled with each stage's seconds (``export``; for INT also ``prepare``,
    ``calibrate``, ``convert``, ``re-export``)."""
    clock = StageClock(stages)
    if mode == "FP":
        with clock("export"):
            return torch.export.export(model, inputs)
    # The same steps as executorch's own Arm test pipeline (ArmQuantize).
    torch.manual_seed(seed)
    q = quantizer(mode, target)
    with clock("export"):
        graph = torch.export.export(model, inputs, strict=True).module(check_guards=False)
    converted = quantize(q, graph, calibration or [inputs], clock)
    with clock("re-export"):
        return torch.export.export(converted, inputs, strict=True)


def quantize(
    q: Any, graph: torch.fx.GraphModule, samples: list[tuple[Any, ...]], clock: StageClock
) -> torch.fx.GraphModule:
    """``q._quantize_with_submodules(graph, samples, False, True)`` (what executorch's Arm
    test pipeline calls), made of its own calls stage by stage when the graph has no
    cond/while submodules (it then runs exactly ``prepare_pt2e``, the calibration loop and
    ``convert_pt2e(fold_quantize=True)``); with them, in one ``quantize`` stage."""
    from executorch.backends.arm.quantizer.arm_quantizer import get_cond_while_submodules_ao
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    if get_cond_while_submodules_ao(graph, apply_quantization=True):
        with clock("quantize"):
            return q._quantize_with_submodules(graph, samples, False, True)  # type: ignore[no-any-return]
    with clock("prepare"):
        prepared = prepare_pt2e(graph, q)
    with clock("calibrate"):
        for sample in samples:
            prepared(*sample)
    with clock("convert"):
        return convert_pt2e(prepared, fold_quantize=True)


def calibration_batches(
    inputs: tuple[torch.Tensor, ...], n: int, seed: int = 1
) -> list[tuple[torch.Tensor, ...]]:
    """``n`` calibration batches: the example inputs, then seeded random ones like them (token
    ids below the largest example id + 1 for integer inputs, normal values otherwise)."""
    g = torch.Generator().manual_seed(seed)
    out = [inputs]
    for _ in range(n - 1):
        batch = []
        for t in inputs:
            if t.dtype in (torch.int32, torch.int64):
                high = int(t.max()) + 1
                batch.append(torch.randint(0, high, t.shape, generator=g, dtype=t.dtype))
            else:
                batch.append(torch.randn(t.shape, generator=g, dtype=t.dtype))
        out.append(tuple(batch))
    return out


def partitioner(mode: str, target: str = TOSA) -> Any:
    """TOSAPartitioner, or EthosUPartitioner for an Ethos-U target."""
    if is_ethos_u(target):
        from executorch.backends.arm.ethosu import EthosUPartitioner

        return EthosUPartitioner(compile_spec(mode, target))
    from executorch.backends.arm.tosa.partitioner import TOSAPartitioner

    return TOSAPartitioner(compile_spec(mode, target))


def lower(exported: Any, mode: str, target: str = TOSA) -> Any:
    """``to_edge_transform_and_lower`` with the target's partitioner, as a user script does."""
    from executorch.exir import to_edge_transform_and_lower

    return to_edge_transform_and_lower(exported, partitioner=[partitioner(mode, target)])


def tosa_bytes(edge: Any) -> list[bytes]:
    """``processed_bytes`` of every lowered module, in graph order: TOSA flatbuffers, or for
    Ethos-U the Vela output (command stream and weights)."""
    from executorch.exir.lowered_backend_module import get_lowered_submodules

    gm = edge.exported_program().graph_module
    return [bytes(lowered.processed_bytes) for _, lowered, _ in get_lowered_submodules(gm)]


def pte_bytes(edge: Any) -> bytes:
    """The serialized ExecuTorch program (.pte) of a lowered edge program manager."""
    return bytes(edge.to_executorch().buffer)


def build(name: str) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...], str]:
    spec = ZOO[name]
    model, inputs = spec.build()
    return model, inputs, spec.mode
