#!/usr/bin/env python3
"""conv2d's wgmma family (1x1 convolutions as the Hopper GEMM kernel) against the implicit-GEMM family and cuDNN on
an H200, for ResNet-50's convolution layers at batch 32, fp16.

    python3 benchmarks/conv2d_hopper_h200.py --out FILE.md --json FILE.json [--seconds 420] [--epilogue none]
                                             [--rows all|1x1|late] [--batch 32] [--pairs]

Rows: every distinct convolution of ResNet-50 (v1.5: the stride in the 3x3) at N = 32 — first the twelve 1x1
stride-1 layers the wgmma family serves, then (with --rows all, the default) the 3x3 layers, the strided 1x1
projections and the 7x7 stem, where the wgmma row says why the family does not apply (C = 3). `--rows late`: the
layers at 14x14 and 7x7 (few output tiles, where the picks include K split into slices or K pairs); `--batch` another
N; `--pairs` adds every K pair (cluster_k=2) the row's space allows over 128-row tiles, stages and stores.

Per row, through the code `tracea tune conv2d` runs (OpBackend("conv2d", "cuda"): each family's space, NVRTC
compile, the check-then-time path): cuDNN (torch.nn.functional.conv2d on channels_last tensors, cudnn.benchmark =
True; a fused epilogue as torch's separate passes after it), then every hand-picked configuration of the wgmma
family (wgmma_space.hand_picked) and up to --implicit of the implicit-GEMM family's (implicit_gemm_space.hand_picked),
then cuDNN again; the faster of cuDNN's two medians is the reference. Every candidate and baseline is checked against
the float64 reference (fresh inputs in [-1, 1], Y poisoned with NaN) before it is timed; one that fails to compile or
is wrong is listed with its reason and never ranked. Timing: CUDA events, L2 flushed between samples, medians.

Ratios: cuDNN time / the family's best (above 1: faster than cuDNN), and implicit-GEMM best / wgmma best. Writes the
Markdown report (--out) and the JSON with every candidate and raw sample (--json) after every row. Exit code 0 when
every row was measured and every served row's wgmma picks passed their check, 1 otherwise.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_run import compiler, measure_between_baselines, num, provenance_lines, run_meta, write_report  # noqa: E402

from tracea_cli.backends.cuda import device_target  # noqa: E402
from tracea_cli.backends.op_backend import OpBackend  # noqa: E402
from tracea_cli.ops.conv2d.families import implicit_gemm_space as ig  # noqa: E402
from tracea_cli.ops.conv2d.families import wgmma_space as ws  # noqa: E402
from tracea_cli.ops.conv2d.families.wgmma import GENERATOR_VERSION  # noqa: E402
from tracea_cli.ops.conv2d.problem import EPILOGUE_NAMES, Conv2dProblem  # noqa: E402
from tracea_cli.timing import TimingPolicy  # noqa: E402

POLICY = TimingPolicy(warmup=3, min_samples=10, max_samples=40, target_cv=0.02, max_seconds=0.6)
N = 32  # the default batch
# ResNet-50 v1.5's distinct convolutions: (C, K, input H = W, R = S, stride)
ONE_BY_ONE = ((64, 64, 56), (64, 256, 56), (256, 64, 56), (256, 128, 56), (128, 512, 28), (512, 128, 28),
              (512, 256, 28), (256, 1024, 14), (1024, 256, 14), (1024, 512, 14), (512, 2048, 7), (2048, 512, 7))
OTHERS = ((64, 64, 56, 3, 1), (128, 128, 56, 3, 2), (128, 128, 28, 3, 1), (256, 256, 28, 3, 2), (256, 256, 14, 3, 1),
          (512, 512, 14, 3, 2), (512, 512, 7, 3, 1), (256, 512, 56, 1, 2), (512, 1024, 28, 1, 2),
          (1024, 2048, 14, 1, 2), (3, 64, 224, 7, 2))


def rows(which: str, epilogue: str, batch: int = N) -> list[Conv2dProblem]:
    specs = [(c, k, hw, 1, 1) for c, k, hw in ONE_BY_ONE] + (list(OTHERS) if which != "1x1" else [])
    if which == "late":  # output at 14x14 or 7x7
        specs = [(c, k, hw, rs, stride) for c, k, hw, rs, stride in specs if hw // stride <= 14]
    return [Conv2dProblem(batch, hw, hw, c, k, rs, rs, stride, stride, rs // 2, rs // 2, dtype="fp16",
                          epilogue=epilogue) for c, k, hw, rs, stride in specs]


def name_of(p: Conv2dProblem) -> str:
    stride = f"/{p.stride_h}" if p.stride_h > 1 else ""
    return f"{p.r}x{p.s}{stride} {p.c}->{p.k} @{p.h}"


PAIR_SWEEP = {"tile_n": (64, 128, 192), "stages": (3, 4, 5, 6), "store": ("direct", "tma")}


def pair_sweep(space, picks: list[dict]) -> list[dict]:
    """Every K pair (cluster_k=2) of 128-row tiles the space allows over PAIR_SWEEP that `picks` lack."""
    base = {"family": "wgmma", "tile_m": 128, "consumers": 2, "schedule": "cooperative", "cluster_m": 1,
            "persistent": 0, "group_m": 8, "split_k": 1, "cluster_k": 2}
    out = []
    for tn in PAIR_SWEEP["tile_n"]:
        for stages in PAIR_SWEEP["stages"]:
            for store in PAIR_SWEEP["store"]:
                config = {**base, "tile_n": tn, "stages": stages, "store": store}
                if space.why_invalid(config) is None and config not in picks:
                    out.append(config)
    return out


def candidates(problem: Conv2dProblem, target, implicit: int, pairs: bool = False) -> tuple[list[dict], str | None]:
    """The wgmma family's hand-picked configurations (or why it does not apply), with `pairs` every valid K pair
    (`pair_sweep`), then the implicit-GEMM family's."""
    served = ws.conv2d_space(problem, target)
    picks = [] if isinstance(served, str) else ws.hand_picked(problem, target)
    if pairs and not isinstance(served, str):
        picks += pair_sweep(served, picks)
    return picks + ig.hand_picked(problem, target)[:implicit], served if isinstance(served, str) else None


def describe(config: dict) -> str:
    return ws.describe(config) if config.get("family") == "wgmma" else ig.describe(config)


def best_of(rows_: list[dict], family: str) -> dict | None:
    timed = [r for r in rows_ if r.get("median_ms") and r["config"].get("family") == family]
    return min(timed, key=lambda r: r["median_ms"], default=None)


def summarize_row(problem: Conv2dProblem, run: dict, why_not: str | None) -> dict:
    base = run.pop("base")
    wg, imp = best_of(run["rows"], "wgmma"), best_of(run["rows"], "mma")

    def brief(r):
        return r and {"config": r["config"], "median_ms": r["median_ms"], "tflops": r["tflops"],
                      "registers": r.get("registers")}

    failed = [r for r in run["rows"] if r["config"].get("family") == "wgmma" and not r.get("median_ms")]
    return {"problem": problem.as_dict(), "label": problem.label, "name": name_of(problem), **run,
            "wgmma_applies": why_not is None, "wgmma_reason": why_not, "wgmma_failed": len(failed),
            "cudnn_ms": base, "wgmma": brief(wg), "implicit_gemm": brief(imp),
            "wgmma_vs_cudnn": base / wg["median_ms"] if base and wg else None,
            "implicit_vs_cudnn": base / imp["median_ms"] if base and imp else None,
            "wgmma_vs_implicit": imp["median_ms"] / wg["median_ms"] if imp and wg else None}


def geomean(values: list[float]) -> float | None:
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def render(results: list[dict], meta: dict) -> str:
    lines = [
        "# conv2d on Hopper: the wgmma family (1x1 as the Hopper GEMM) against implicit GEMM and cuDNN",
        "",
        *provenance_lines(meta),
        f"- versions: conv2d wgmma generator {meta['conv_generator']}, NVRTC {meta['nvrtc']}, CuPy {meta['cupy']}, "
        f"torch {meta.get('torch')}, cuDNN {meta.get('cudnn')}, Python {meta['python']}",
        "- method: per row cuDNN (channels_last, cudnn.benchmark = True), every hand-picked wgmma configuration and "
        f"up to {meta['implicit']} implicit-GEMM ones, cuDNN again; each checked against the float64 reference before "
        f"it is timed; CUDA events, L2 flushed between samples, {POLICY.warmup} warm-up runs, "
        f"{POLICY.min_samples}-{POLICY.max_samples} samples, medians. cuDNN: the faster of its two medians. "
        "ratio = cuDNN time / the family's best time (above 1: faster than cuDNN).",
        f"- ResNet-50 v1.5 convolutions at N = {meta.get('batch', N)}, fp16, epilogue {meta['epilogue']}",
        "",
        "| layer | M (N·P·Q) | cuDNN ms | wgmma ms | wgmma TFLOP/s | wgmma / cuDNN | implicit ms | implicit / cuDNN | "
        "wgmma vs implicit | best wgmma configuration |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        p = Conv2dProblem(**r["problem"])
        wg, imp = r.get("wgmma") or {}, r.get("implicit_gemm") or {}
        config = describe(wg["config"]) if wg else (f"not served: {r['wgmma_reason'][:60]}..." if r.get(
            "wgmma_reason") else r.get("error", "no wgmma pick passed"))
        lines.append(f"| {r.get('name', name_of(p))} | {p.gemm_m} | {num(r.get('cudnn_ms'), 4)} | "
                     f"{num(wg.get('median_ms'), 4)} | {num(wg.get('tflops'), 1)} | "
                     f"{num(r.get('wgmma_vs_cudnn'), 2)} | "
                     f"{num(imp.get('median_ms'), 4)} | {num(r.get('implicit_vs_cudnn'), 2)} | "
                     f"{num(r.get('wgmma_vs_implicit'), 2)} | {config} |")
    served = [r for r in results if r.get("wgmma_applies")]
    g1 = geomean([r["wgmma_vs_cudnn"] for r in served if r.get("wgmma_vs_cudnn")])
    g2 = geomean([r["implicit_vs_cudnn"] for r in served if r.get("implicit_vs_cudnn")])
    lines += ["", f"The {len(served)} rows the wgmma family serves: geometric mean of cuDNN / wgmma "
              f"{num(g1, 3)}, of cuDNN / implicit GEMM {num(g2, 3)}."]
    lines += ["", "## Every candidate", ""]
    for r in results:
        lines.append(f"**{r['label']}** — {r.get('baseline', '')}: "
                     + ", ".join(f"{m:.4f}" for m in r.get("baseline_ms", []) if m) + " ms"
                     + (f"; wgmma: {r['wgmma_reason']}" if r.get("wgmma_reason") else ""))
        lines.append("")
        for row in sorted(r.get("rows", []), key=lambda x: x.get("median_ms") or math.inf):
            what = (f"{row['median_ms']:.4f} ms, {row['tflops']:.1f} TFLOP/s, {row.get('registers')} registers, "
                    f"error {row.get('rel_error')}" if row.get("median_ms")
                    else f"{row['status']}: {(row.get('reason') or '')[:200]}")
            lines.append(f"- {describe(row['config'])}: {what}")
        lines.append("")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="the Markdown report")
    ap.add_argument("--json", required=True, help="every candidate and raw sample")
    ap.add_argument("--seconds", type=float, default=420.0, help="stop starting rows after this many seconds")
    ap.add_argument("--rows", choices=("all", "1x1", "late"), default="all")
    ap.add_argument("--batch", type=int, default=N, help="N of every row")
    ap.add_argument("--epilogue", choices=EPILOGUE_NAMES, default="none")
    ap.add_argument("--implicit", type=int, default=4, help="implicit-GEMM hand-picked configurations per row")
    ap.add_argument("--pairs", action="store_true", help="also every valid K pair (cluster_k=2) of 128-row tiles")
    args = ap.parse_args(argv)
    start = time.monotonic()
    target = device_target(0)
    backend = OpBackend("conv2d", "cuda")
    meta = run_meta(target, argv)
    meta.update(conv_generator=GENERATOR_VERSION, epilogue=args.epilogue, implicit=args.implicit, batch=args.batch)
    try:
        import torch

        meta["torch"], meta["cudnn"] = torch.__version__, torch.backends.cudnn.version()
    except Exception as e:  # the rows then say why their baseline is missing
        meta["torch"] = f"unavailable ({e})"
    plans = [(p, *candidates(p, target, args.implicit, args.pairs)) for p in rows(args.rows, args.epilogue, args.batch)]

    build = compiler(backend, target)

    pool = ThreadPoolExecutor(max_workers=16)  # NVRTC releases the GIL: compiles overlap the GPU work
    futures = [[pool.submit(build, (p, c)) for c in configs] for p, configs, _ in plans]
    results: list[dict] = []
    for (problem, configs, why_not), pending in zip(plans, futures):
        if time.monotonic() - start > args.seconds:
            results.append({"problem": problem.as_dict(), "label": problem.label, "rows": [],
                            "error": f"not measured: the run's {args.seconds:.0f} s were spent"})
            continue
        print(f"{problem.label}: {len(configs)} candidates" + (f" (wgmma: {why_not})" if why_not else ""), flush=True)
        try:
            built = [f.result() for f in pending]
            run = measure_between_baselines(backend, problem, target, configs, built, policy=POLICY,
                                            log=lambda s: print(s, flush=True))
            results.append(summarize_row(problem, run, why_not))
        except Exception as e:
            traceback.print_exc()
            results.append({"problem": problem.as_dict(), "label": problem.label, "rows": [],
                            "error": f"{type(e).__name__}: {e}"})
        write_report(results, meta, render, Path(args.out), Path(args.json))
    pool.shutdown(cancel_futures=True)
    meta["seconds"] = round(time.monotonic() - start, 1)
    write_report(results, meta, render, Path(args.out), Path(args.json))
    print(f"done in {meta['seconds']} s: {args.out}", flush=True)
    measured = all(r.get("cudnn_ms") and (r.get("wgmma") or not r.get("wgmma_applies")) for r in results)
    clean = all(not r.get("wgmma_failed") for r in results)
    return 0 if measured and clean else 1


if __name__ == "__main__":
    sys.exit(main())
