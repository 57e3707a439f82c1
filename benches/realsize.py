"""Real models at real size, stock vs accelerated, each side in its own process.

    python benches/realsize.py --list
    python benches/realsize.py --models smollm2-135m --layers 2,4 --targets tosa-int \
        [--sides stock,accel] [--out benches/results/realsize.jsonl] [--profile] [--no-pte]
    python benches/realsize.py --plot benches/results/realsize.jsonl [--png OUT.png]

Models are built from their published configurations with seeded random weights (no
downloads): the ``transformers`` decoders with ``from_config`` (eager attention, ``--seq``
tokens, logits out), the Whisper-tiny encoder, torchvision's MobileNetV2 / ResNet-50 and timm's
DeiT-tiny; the two 1.5-2B decoders of executorch's own ``test/models`` ``full_models`` tests are
built from those tests' configurations and wrappers, in bf16 as there. ``--layers`` sets the
depth of the decoders, of the Whisper encoder and of DeiT (default: the published depth).

Each (model, depth, target, side) runs in a fresh interpreter with ``PYTHONHASHSEED=0`` (stock's
output varies with the string hash seed) and ``ARM_ACCEL=0`` for stock. The child times each
stage -- imports, building the model, export (with quantization for INT), the lowering
(``to_edge_transform_and_lower``), the ``.pte`` serialization -- and records the RSS high-water
mark of each (``/proc/self/clear_refs`` resets it between stages), a digest of the lowered
modules' bytes (TOSA flatbuffers, or Vela's output for Ethos-U) and of the ``.pte``. The parent
adds the process's wall time ("script": interpreter start to exit), its resident plus swapped-out
memory sampled every second (the peak the table shows is the larger of the two: the high-water
mark alone understates a run that swapped) and the load average around the run. Each result is
appended to ``--out`` as one JSON line (a failure too: out of memory, time-out), so long runs
accumulate and ``--skip-done`` resumes them; the table printed at the end pairs the two sides of
each configuration.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from memory import PEAK_HELPERS, ChildFailed, run_child  # benches/ is sys.path[0]

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "results", "realsize.jsonl")


# ------------------------------------------------------------------------------------ models
@dataclass(frozen=True)
class RealModel:
    name: str
    kind: str  # "decoder", "encoder", "vision"
    depth: int | None  # published depth (layers / blocks); None: fixed architecture
    what: str


# Published configurations (the models' config.json fields that shape the graph).
SMOLLM2_135M: dict[str, Any] = {
    "hidden_size": 576,
    "intermediate_size": 1536,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "num_hidden_layers": 30,
    "vocab_size": 49152,
    "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-5,
    "rope_theta": 100000.0,
    "tie_word_embeddings": True,
    "use_cache": False,
}
QWEN25_05B: dict[str, Any] = {
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "num_hidden_layers": 24,
    "vocab_size": 151936,
    "max_position_embeddings": 32768,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "tie_word_embeddings": True,
    "use_cache": False,
}
LLAMA32_1B: dict[str, Any] = {
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "num_hidden_layers": 16,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0,
    "rope_scaling": {
        "rope_type": "llama3",
        "factor": 32.0,
        "high_freq_factor": 4.0,
        "low_freq_factor": 1.0,
        "original_max_position_embeddings": 8192,
    },
    "tie_word_embeddings": True,
    "use_cache": False,
}
DECODERS: dict[str, tuple[str, dict[str, Any]]] = {
    "smollm2-135m": ("llama", SMOLLM2_135M),
    "qwen2.5-0.5b": ("qwen2", QWEN25_05B),
    "llama3.2-1b": ("llama", LLAMA32_1B),
}
# Whisper-tiny's encoder (openai/whisper-tiny config.json): 30 s of 80-bin log-mel frames.
WHISPER_TINY: dict[str, Any] = {
    "d_model": 384,
    "encoder_layers": 4,
    "encoder_attention_heads": 6,
    "encoder_ffn_dim": 1536,
    "num_mel_bins": 80,
    "max_source_positions": 1500,
}

REGISTRY: dict[str, RealModel] = {
    m.name: m
    for m in (
        RealModel("smollm2-135m", "decoder", 30, "SmolLM2-135M config, transformers Llama"),
        RealModel("qwen2.5-0.5b", "decoder", 24, "Qwen2.5-0.5B config, transformers Qwen2"),
        RealModel("llama3.2-1b", "decoder", 16, "Llama-3.2-1B config, transformers Llama"),
        RealModel("whisper-tiny-encoder", "encoder", 4, "Whisper-tiny encoder, 3000 frames"),
        RealModel("mobilenetv2", "vision", None, "torchvision MobileNetV2, 224x224"),
        RealModel("resnet50", "vision", None, "torchvision ResNet-50, 224x224"),
        RealModel("deit-tiny", "vision", 12, "timm deit_tiny_patch16_224"),
        RealModel(
            "deepseek-r1-1.5b",
            "decoder",
            28,
            "test/models DeepSeek-R1-Distill-Qwen-1.5B base model (full_models), bf16",
        ),
        RealModel(
            "qwen3-vl-2b-text",
            "decoder",
            28,
            "test/models Qwen3-VL-2B-Instruct text model (full_models), bf16",
        ),
    )
}


def _whisper_encoder(layers: int, seed: int) -> tuple[Any, tuple[Any, ...]]:
    import torch
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    class Encoder(torch.nn.Module):
        """Whisper's encoder returning its last hidden state only."""

        def __init__(self, config: Any) -> None:
            super().__init__()
            self.encoder = WhisperEncoder(config)

        def forward(self, input_features: torch.Tensor) -> torch.Tensor:
            return self.encoder(input_features).last_hidden_state

    config = WhisperConfig(**{**WHISPER_TINY, "encoder_layers": layers})
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = Encoder(config).eval()
    frames = 2 * WHISPER_TINY["max_source_positions"]
    return model, (torch.randn(1, WHISPER_TINY["num_mel_bins"], frames),)


def _vision(name: str, layers: int | None, seed: int) -> tuple[Any, tuple[Any, ...]]:
    import torch

    torch.manual_seed(seed)
    if name == "deit-tiny":
        import timm

        model = timm.create_model("deit_tiny_patch16_224", pretrained=False, depth=layers)
    else:
        import torchvision

        tv = torchvision.models
        model = {"mobilenetv2": tv.mobilenet_v2, "resnet50": tv.resnet50}[name](weights=None)
    return model.eval(), (torch.randn(1, 3, 224, 224),)


def _upstream_full_model(name: str, layers: int, seed: int) -> tuple[Any, tuple[Any, ...]]:
    """The base model of executorch's own ``full_models`` test, its checkpoint configuration at
    ``layers`` layers, in bf16 as the test lowers it."""
    import torch
    from executorch.backends.arm.test.models.model_test_utils import to_bfloat16

    if name == "deepseek-r1-1.5b":
        from executorch.backends.arm.test.models.DeepSeek_R1_Distill_Qwen import (
            test_deepseek_r1_distill_qwen_model as t,
        )

        config = t._make_deepseek_r1_distill_qwen_1_5b_model_config()
        config.num_hidden_layers = layers
        config.layer_types = ["full_attention"] * layers
        torch.manual_seed(seed)
        model, inputs = t.BaseModelWrapper(config).eval(), t._make_model_inputs(config)
    else:
        from executorch.backends.arm.test.models.Qwen3_VL import test_qwen3_vl_model as t

        config = t._make_qwen3_vl_2b_instruct_layer_config()
        config.text_config.num_hidden_layers = layers
        model, inputs = t.TextModelWrapper.prepare_model_and_inputs(lambda: config)
    return to_bfloat16(model, inputs)


def build(name: str, layers: int | None, seq: int, seed: int = 0) -> tuple[Any, tuple[Any, ...]]:
    """The model ``name`` of :data:`REGISTRY` at ``layers`` (None: published depth)."""
    spec = REGISTRY[name]
    depth = layers if layers is not None else spec.depth
    if name in DECODERS:
        from arm_accel.tools import models

        family, config = DECODERS[name]
        return models.build_hf_causal_lm(family, {**config, "num_hidden_layers": depth}, seq, seed)
    if name == "whisper-tiny-encoder":
        return _whisper_encoder(depth, seed)
    if spec.kind == "vision":
        return _vision(name, depth, seed)
    return _upstream_full_model(name, depth, seed)


# ----------------------------------------------------------------------------------- targets
@dataclass(frozen=True)
class Target:
    name: str
    mode: str  # the TOSA profile: "INT", "FP", "FP+bf16"
    target: str  # models.TARGETS


TARGETS: dict[str, Target] = {
    t.name: t
    for t in (
        Target("tosa-int", "INT", "tosa"),
        Target("tosa-fp", "FP", "tosa"),
        Target("tosa-fp-bf16", "FP+bf16", "tosa"),
        Target("u85-int", "INT", "ethos-u85-256"),
    )
}


# ------------------------------------------------------------------------------------- child
CHILD = (
    PEAK_HELPERS
    + r"""
import sys, time
start = time.perf_counter()
sys.path.insert(0, sys.argv[1])
import realsize
realsize.child(sys.argv[2:], start, status, reset_peak)
"""
)


def child(argv: list[str], start: float, status: Callable[[str], int], reset_peak: Any) -> None:
    """One side of one configuration (run by :data:`CHILD`); prints one JSON object."""
    import hashlib

    name, layers_arg, seq, target_name, flags = argv[0], argv[1], int(argv[2]), argv[3], argv[4]
    layers = None if layers_arg == "-" else int(layers_arg)
    tgt = TARGETS[target_name]
    record: dict[str, Any] = {}
    peaks: dict[str, int] = {}

    def stage(label: str, fn: Callable[[], Any]) -> Any:
        reset_peak()
        t0 = time.perf_counter()
        value = fn()
        record[f"{label}_s"] = round(time.perf_counter() - t0, 3)
        peaks[label] = status("VmHWM:")
        return value

    def imports() -> None:
        import executorch.backends.arm._passes  # noqa: F401 - activation (the hook)
        import executorch.exir  # noqa: F401
        import torch  # noqa: F401
        from arm_accel.tools import models  # noqa: F401

    stage("imports", imports)
    import torch
    from arm_accel.tools import models

    # The model and the exported program are dropped once used, as a script's would be.
    held: dict[str, Any] = {}
    held["model"], inputs = stage("build", lambda: build(name, layers, seq))

    def export() -> Any:
        model = held.pop("model")
        with torch.no_grad():
            if tgt.mode.startswith("FP"):
                return torch.export.export(model, inputs)
            return models.export_for_arm(model, inputs, tgt.mode, target=tgt.target)

    held["exported"] = stage("export", export)

    def lower() -> Any:
        return models.lower(held.pop("exported"), tgt.mode, tgt.target)

    profile = None
    if "profile" in flags:
        from arm_accel.tools import profiling

        with profiling.profiled() as profile:
            edge = stage("lower", lower)
    else:
        edge = stage("lower", lower)
    lowered = models.tosa_bytes(edge)
    record["delegates"] = len(lowered)
    record["lowered_bytes"] = sum(len(b) for b in lowered)
    record["lowered_digest"] = hashlib.sha256(b"".join(lowered)).hexdigest()[:16]
    del lowered
    if "pte" in flags:
        pte = stage("pte", lambda: models.pte_bytes(edge))
        record["pte_bytes"] = len(pte)
        record["pte_digest"] = hashlib.sha256(pte).hexdigest()[:16]
        del pte
    record["child_s"] = round(time.perf_counter() - start, 3)
    record["peak_rss"] = max(peaks.values())
    record["peak_rss_by_stage"] = peaks
    if profile is not None:
        record["profile"] = [
            [r.name, r.calls, round(r.seconds, 3)] for r in profile.sorted_rows()[:40]
        ]
    import arm_accel

    entries = arm_accel.stats().items()
    record["accelerated_calls"] = sum(s.accelerated for _, s in entries)
    record["fallbacks"] = sum(s.fallback_count for _, s in entries)
    print(json.dumps(record))


# ------------------------------------------------------------------------------------ parent
def _git_commit() -> str:
    out = subprocess.run(
        ["git", "-C", HERE, "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    return out.stdout.strip()


def side(
    name: str, layers: int | None, seq: int, target: str, accel: bool, flags: str, timeout: float
) -> dict[str, Any]:
    """Run one side in a fresh interpreter; the child's record plus the parent's figures."""
    env = dict(os.environ, ARM_ACCEL="1" if accel else "0", PYTHONHASHSEED="0")
    depth = layers if layers is not None else REGISTRY[name].depth
    record: dict[str, Any] = {
        "model": name,
        "layers": depth,
        "seq": seq,
        "target": target,
        "side": "accel" if accel else "stock",
        "commit": _git_commit(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "load_before": os.getloadavg()[0],
    }
    args = (HERE, name, "-" if layers is None else str(layers), str(seq), target, flags)
    t0 = time.perf_counter()
    try:
        record.update(run_child(CHILD, *args, env=env, timeout=timeout))
        record["status"] = "ok"
    except ChildFailed as exc:
        record["status"] = (
            "timeout" if exc.returncode is None
            else "killed (signal 9: out of memory?)" if exc.returncode == -9
            else f"failed ({exc.returncode})"
        )  # fmt: skip
        record["error"] = exc.stderr.strip().splitlines()[-1:] if exc.stderr else []
    record["script_s"] = round(time.perf_counter() - t0, 3)
    record["load_after"] = os.getloadavg()[0]
    return record


def _key(r: dict[str, Any]) -> tuple[Any, ...]:
    return (r["model"], r["layers"], r["seq"], r["target"])


def read(path: str) -> list[dict[str, Any]]:
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def pairs(records: Iterable[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(stock, accel) of each configuration, the latest successful record of each side (a
    configuration missing one side pairs with an empty record)."""
    latest: dict[tuple[Any, ...], dict[str, dict[str, Any]]] = {}
    for r in records:
        if r.get("status") == "ok" or r["side"] not in latest.get(_key(r), {}):
            latest.setdefault(_key(r), {})[r["side"]] = r
    return [(d.get("stock", {}), d.get("accel", {})) for _, d in sorted(latest.items(), key=str)]


def peak_memory(r: dict[str, Any]) -> int | None:
    """A side's peak: the larger of its stages' ``VmHWM`` and the parent's sampled resident plus
    swapped-out bytes (``VmHWM`` alone understates a run that swapped)."""
    hwm, sampled = r.get("peak_rss"), r.get("rss_swap_peak_sampled")
    values = [v for v in (hwm, sampled) if isinstance(v, int)]
    return max(values) if values else None


def _gb(v: Any) -> str:
    return f"{v / 2**30:.2f}" if isinstance(v, int) else "-"


def _ratio(a: Any, b: Any) -> str:
    return f"{a / b:.2f}x" if isinstance(a, (int, float)) and isinstance(b, (int, float)) else "-"


def table(records: Iterable[dict[str, Any]]) -> str:
    head = (
        "| model | layers | target | lowering stock s | accel s | ratio | script stock s | "
        "accel s | ratio | peak memory stock GiB | accel GiB | lowered equal | .pte equal |\n"
        "|---|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|---|---|\n"
    )
    rows = []
    for s, a in pairs(records):
        r = s or a
        status = {x["side"]: x["status"] for x in (s, a) if x}
        same = (
            "yes" if s.get("lowered_digest") and s.get("lowered_digest") == a.get("lowered_digest")
            else "NO" if s.get("lowered_digest") and a.get("lowered_digest") else "-"
        )  # fmt: skip
        pte = (
            "yes" if s.get("pte_digest") and s.get("pte_digest") == a.get("pte_digest")
            else "NO" if s.get("pte_digest") and a.get("pte_digest") else "-"
        )  # fmt: skip
        cell = {
            side: (x.get("lower_s", x.get("status", "-")) if x else "-")
            for side, x in (("stock", s), ("accel", a))
        }
        bad = {k: v for k, v in status.items() if v != "ok"}
        rows.append(
            f"| {r['model']} | {r['layers']} | {r['target']} | {cell['stock']} | {cell['accel']}"
            f" | {_ratio(s.get('lower_s'), a.get('lower_s'))} | {s.get('script_s', '-')} | "
            f"{a.get('script_s', '-')} | {_ratio(s.get('script_s'), a.get('script_s'))} | "
            f"{_gb(peak_memory(s))} | {_gb(peak_memory(a))} | {same} | {pte} |"
            + (f" {bad}" if bad else "")
        )
    return head + "\n".join(rows) + "\n"


def plot(records: list[dict[str, Any]], path: str) -> None:
    """Lowering seconds and peak memory against depth, stock and accelerated, one column per
    (model, target) measured at more than one depth."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in records if r.get("status") == "ok"]
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in ok:
        groups.setdefault((r["model"], r["target"]), []).append(r)
    groups = {k: v for k, v in groups.items() if len({r["layers"] for r in v}) > 1} or groups
    if not groups:
        return
    fig, axes = plt.subplots(2, len(groups), figsize=(4.2 * len(groups), 7), squeeze=False)
    for col, ((model, target), rs) in enumerate(sorted(groups.items())):
        for side, color in (("stock", "C3"), ("accel", "C0")):
            pts = {r["layers"]: r for r in rs if r["side"] == side}
            xs = sorted(pts)
            if not xs:
                continue
            axes[0][col].plot(xs, [pts[x]["lower_s"] for x in xs], "o-", color=color,
                              label=f"{side} lowering")  # fmt: skip
            axes[0][col].plot(xs, [pts[x]["script_s"] for x in xs], "s--", color=color,
                              alpha=0.6, label=f"{side} script")  # fmt: skip
            peaks = [(peak_memory(pts[x]) or 0) / 2**30 for x in xs]
            axes[1][col].plot(xs, peaks, "o-", color=color, label=f"{side} peak memory")
        axes[0][col].set_title(f"{model}, {target}", fontsize=9)
        axes[0][col].set_ylabel("seconds")
        axes[1][col].set_ylabel("peak memory (GiB)")
        axes[1][col].set_xlabel("layers")
        for ax in (axes[0][col], axes[1][col]):
            ax.legend(fontsize=7)
            ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--list", action="store_true", help="print the models and targets")
    ap.add_argument("--models", default="smollm2-135m")
    ap.add_argument("--layers", default="", help="comma-separated depths (default: published)")
    ap.add_argument("--targets", default="tosa-int")
    ap.add_argument("--sides", default="stock,accel")
    ap.add_argument("--seq", type=int, default=32, help="decoder tokens")
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--timeout", type=float, default=None, help="seconds per side")
    ap.add_argument("--no-pte", action="store_true", help="skip the .pte serialization")
    ap.add_argument("--profile", action="store_true", help="keep the lowering's profile rows")
    ap.add_argument("--skip-done", action="store_true", help="skip sides already in --out")
    ap.add_argument("--plot", metavar="JSONL", help="plot (and tabulate) a results file")
    ap.add_argument("--png", default=None)
    args = ap.parse_args(argv)
    if args.list:
        for m in REGISTRY.values():
            print(f"{m.name:22} depth {m.depth or '-':>3}  {m.what}")
        print("targets:", ", ".join(TARGETS))
        return 0
    if args.plot:
        records = read(args.plot)
        print(table(records), end="")
        plot(records, args.png or os.path.splitext(args.plot)[0] + ".png")
        return 0
    flags = ",".join(f for f, on in (("pte", not args.no_pte), ("profile", args.profile)) if on)
    done = {(*_key(r), r["side"]) for r in read(args.out) if r.get("status") == "ok"}
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    written: list[dict[str, Any]] = []
    depths: list[int | None] = [int(x) for x in args.layers.split(",") if x] or [None]
    for name in args.models.split(","):
        for layers in depths if REGISTRY[name].depth is not None else [None]:
            for target in args.targets.split(","):
                for side_name in args.sides.split(","):
                    depth = layers if layers is not None else REGISTRY[name].depth
                    if args.skip_done and (name, depth, args.seq, target, side_name) in done:
                        continue
                    r = side(name, layers, args.seq, target, side_name == "accel", flags,
                             args.timeout)  # fmt: skip
                    with open(args.out, "a") as f:
                        f.write(json.dumps(r) + "\n")
                    written.append(r)
                    print(
                        f"{name} L{r['layers']} {target} {side_name}: {r['status']}, lowering "
                        f"{r.get('lower_s', '-')} s, script {r['script_s']} s, peak "
                        f"{_gb(peak_memory(r))} GiB, lowered {r.get('lowered_digest', '-')}",
                        flush=True,
                    )
    print(table(written), end="")
    return 0 if all(r["status"] == "ok" for r in written) else 1


if __name__ == "__main__":
    sys.exit(main())
