"""Side-by-side benchmark of the four view/permute fusion passes: stock vs accelerated, same
run, same inputs.

Lowers each model once (stock passes, via ``arm_accel.tools.capture``), then replays every
captured input of each pass through the stock class and the accelerated class, alternating, and
prints the total seconds and the ratio stock / accelerated per (model, pass), and ``min-ratio``:
the same ratio over each call's fastest repeat (robust to pauses from other processes on a shared
machine). The graphs are checked equal as they go.

    python benches/fusion_passes.py [--models dscnnkws,resnet8,llama1,llama1-fp] [--repeat 3]
"""

from __future__ import annotations

import argparse
import gc
import time
from typing import Any

from arm_accel.testing import assert_graphs_equal
from arm_accel.tools import capture
from arm_accel.tools.fusion_replay import as_class, capture_lowering, pass_pairs, tosa_context


def _timed(pass_obj: Any, record: capture.Captured) -> tuple[float, Any]:
    gm = record.fresh_graph()
    gc.collect()
    gc.disable()  # sub-millisecond calls: a collection pause would dominate either side
    try:
        t0 = time.perf_counter()
        result = pass_obj.call(gm)
        return time.perf_counter() - t0, result
    finally:
        gc.enable()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="dscnnkws,resnet8,llama1,llama1-fp")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    print(
        f"{'model':<12} {'pass':<46} {'calls':>5} {'stock s':>9} {'accel s':>9} {'ratio':>6}"
        f" {'min-ratio':>9}"
    )
    for name in args.models.split(","):
        recs_all, mode = capture_lowering(name)
        for pass_name, ours_cls, stock_cls in pass_pairs():
            recs = [r for r in recs_all if r.pass_name == pass_name]
            t_stock = t_ours = 0.0
            # Per record, the fastest of the repeats: robust to pauses from other processes.
            best_stock = [float("inf")] * len(recs)
            best_ours = [float("inf")] * len(recs)
            with tosa_context(recs_all, mode):  # warm-up, untimed (first-call costs)
                for r in recs[:1]:
                    _timed(as_class(r.pass_instance, stock_cls), r)
                    _timed(as_class(r.pass_instance, ours_cls), r)
            for rep in range(args.repeat):
                for k, r in enumerate(recs):
                    with tosa_context(recs_all, mode):
                        if rep % 2:  # alternate which runs first
                            to, ro = _timed(as_class(r.pass_instance, ours_cls), r)
                            ts, rs = _timed(as_class(r.pass_instance, stock_cls), r)
                        else:
                            ts, rs = _timed(as_class(r.pass_instance, stock_cls), r)
                            to, ro = _timed(as_class(r.pass_instance, ours_cls), r)
                    assert_graphs_equal(rs.graph_module, ro.graph_module)
                    t_stock += ts
                    t_ours += to
                    best_stock[k] = min(best_stock[k], ts)
                    best_ours[k] = min(best_ours[k], to)
            ratio = t_stock / t_ours if t_ours else float("nan")
            min_ratio = sum(best_stock) / sum(best_ours) if recs else float("nan")
            print(
                f"{name:<12} {pass_name:<46} {len(recs):>5} {t_stock:>9.4f} {t_ours:>9.4f}"
                f" {ratio:>6.2f} {min_ratio:>9.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
