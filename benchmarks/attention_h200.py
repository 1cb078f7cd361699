"""attention on a GPU (issue 16): the FA2-style CUDA family against torch's SDPA in the same run, fp16 and bf16.

    python benchmarks/attention_h200.py [--out DIR] [--section all|prefill|decode|wgmma] [--seconds S] [--dry-run]

Problems (most important first; the deadline cuts the tail): B = 4, H = 16, L = 4096, head dim 128 and 64, causal and
not, bf16 and fp16; grouped-query attention (32 query heads, 8 K/V heads, L = 4096, D = 128, causal and not); decode
(L_q = 1 against L_k = 8192, 32/8 heads, D = 128).

Per problem, in one process, A B A B: torch SDPA as a user calls it (torch picks the backend; the label names the
one that ran), every hand-picked FA2 configuration (each checked against the float64 reference through the one
check path before it is timed; a wrong one is reported, never timed), then SDPA pinned to cuDNN, flash and
efficient (each checked the same way; a backend torch refuses for the shape is reported with its reason), then SDPA
default again. ratio = the faster of the two default medians / ours (> 1: ours is faster); each backend's ratio is
against its own median.

Decode section (split-KV, docs/attention.md): L_q = 1 against L_k = 1024, 8192 and 32768, batch 1 and 8, 32 query / 8
K/V heads, D 128, bf16. Per problem the same A B A B order, the fa2 candidates being the first three distinct tiles of
the hand-picked list, each with kv_splits 1, 2, 4, 8, 16 and 32 (those the space admits; every one checked before it
is timed). Reported: the best median per kv_splits, the best overall, the fastest SDPA backend of those that ran
(default, cuDNN, flash, efficient, each timed on its own) and ours against it and against each.

wgmma section (the FA3-style family fa3 for sm_90a, not part of `all`): B 4, H 16, L 4096, D 128 bf16, not causal and
causal; B 4, H 32, L 1024, D 64 fp16; B 2, H 16, L 16384, D 128 bf16 causal. Per problem the same A B A B order with
every hand-picked fa3 configuration, the version without ping-pong of each ping-pong pick that is not itself a pick,
and the first fa2 hand-pick (each checked before it is timed). Its report has a ping-pong table: each ping-pong
configuration beside the same configuration without it (the ladder's ping-pong step).

Writes OUT/attention_h200.md and .json (prefill), OUT/attention_decode_h200.md and .json (decode) and
OUT/attention_wgmma_h200.md and .json (wgmma) (OUT: --out, else $OUT, else /tmp/out) after every problem, so a run cut
short keeps what it measured. --seconds: the deadline of each section (default 150 s prefill, 300 s decode, 150 s
wgmma). `--dry-run` (no GPU): compiles every problem's candidates for sm_90a here and prints their registers and
spills.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_run import compile_all, median_ms, num, provenance_lines, resources_of, run_meta  # noqa: E402

from tracea_cli.backends.op_backend import OpBackend  # noqa: E402
from tracea_cli.ops.attention.families import wgmma_space  # noqa: E402
from tracea_cli.ops.attention.families.fa2_space import KV_SPLITS, describe, fa2_space, hand_picked  # noqa: E402
from tracea_cli.ops.attention.problem import AttentionProblem  # noqa: E402
from tracea_cli.stats import summarize  # noqa: E402
from tracea_cli.timing import TimingPolicy  # noqa: E402

OP = "attention"
POLICY = TimingPolicy(warmup=3, min_samples=10, max_samples=30, target_cv=0.02, max_seconds=0.4)
PINNED = ("sdpa-cudnn", "sdpa-flash", "sdpa-efficient")


def _problems() -> tuple[AttentionProblem, ...]:
    out = []
    for d in (128, 64):
        for dtype in ("bf16", "fp16"):
            for causal in (False, True):
                out.append(AttentionProblem(4, 16, 4096, d, 16, 4096, dtype, causal=causal))
    out += [AttentionProblem(4, 32, 4096, 128, 8, 4096, "bf16", causal=c) for c in (False, True)]
    out.append(AttentionProblem(4, 32, 1, 128, 8, 8192, "bf16"))
    # the most important first: D 128 and D 64 bf16 before fp16, then GQA and decode
    order = [0, 1, 4, 5, 8, 9, 10, 2, 3, 6, 7]
    return tuple(out[i] for i in order)


PROBLEMS = _problems()
DECODE_PROBLEMS = tuple(AttentionProblem(b, 32, 1, 128, 8, kv, "bf16") for b in (1, 8) for kv in (8192, 32768, 1024))
DECODE_TILES = 3  # distinct (block_m, block_n, warps, stages) of the hand-picked list, each with every kv_splits
WGMMA_PROBLEMS = (AttentionProblem(4, 16, 4096, 128, 16, 4096, "bf16"),
                  AttentionProblem(4, 16, 4096, 128, 16, 4096, "bf16", causal=True),
                  AttentionProblem(4, 32, 1024, 64, 32, 1024, "fp16"),
                  AttentionProblem(2, 16, 16384, 128, 16, 16384, "bf16", causal=True))
SECONDS = {"prefill": 150.0, "decode": 300.0, "wgmma": 150.0}
SECTION_PROBLEMS = {"prefill": PROBLEMS, "decode": DECODE_PROBLEMS, "wgmma": WGMMA_PROBLEMS}
STEMS = {"prefill": "attention_h200", "decode": "attention_decode_h200", "wgmma": "attention_wgmma_h200"}


def wgmma_configs(problem: AttentionProblem, target: Any) -> list[dict]:
    """Every hand-picked fa3 configuration, the pingpong = 0 twin of each ping-pong pick (where not a pick itself and
    the space admits it), then the first fa2 hand-pick."""
    picks = wgmma_space.hand_picked(problem, target)
    space = wgmma_space.fa3_space(problem, target)
    twins = [{**c, "pingpong": 0} for c in picks if wgmma_space.pingpong_of(c)]
    twins = [c for c in twins if space.why_invalid(c) is None]
    return picks + [c for i, c in enumerate(twins) if c not in picks and c not in twins[:i]] + \
        hand_picked(problem, target)[:1]


@dataclass(frozen=True)
class PingpongPair:
    """One ping-pong configuration's timing beside the same configuration without ping-pong (None: not timed)."""

    problem: str
    without: str
    without_ms: float | None
    with_ms: float | None
    with_tflops: float | None

    @property
    def gain(self) -> float | None:
        """The median without over the median with (> 1: ping-pong is faster)."""
        return self.without_ms / self.with_ms if self.without_ms and self.with_ms else None


def pingpong_pairs(result: dict) -> list[PingpongPair]:
    """The wgmma section's ping-pong rows of one problem, each with its pingpong = 0 twin's row."""
    rows = [x for x in result.get("rows", []) if x.get("config", {}).get("family") == wgmma_space.FAMILY]
    pairs = []
    for x in rows:
        if not wgmma_space.pingpong_of(x["config"]):
            continue
        twin = next((y for y in rows if y["config"] == {**x["config"], "pingpong": 0}), {})
        pairs.append(PingpongPair(result["problem"], wgmma_space.describe({**x["config"], "pingpong": 0}),
                                  twin.get("median_ms"), x.get("median_ms"), x.get("tflops")))
    return pairs


def section_configs(section: str, problem: AttentionProblem, target: Any) -> list[dict]:
    if section == "decode":
        return decode_configs(problem, target)
    if section == "wgmma":
        return wgmma_configs(problem, target)
    return hand_picked(problem, target)


def label(config: dict) -> str:
    """The family's short label of a configuration (fa3 or fa2)."""
    return wgmma_space.describe(config) if config.get("family") == wgmma_space.FAMILY else describe(config)


def decode_configs(problem: AttentionProblem, target: Any) -> list[dict]:
    """The first DECODE_TILES tiles of hand_picked (pack_gqa part of the tile), each with every kv_splits the space
    admits."""
    space = fa2_space(problem, target)
    tiles: list[dict] = []
    for c in hand_picked(problem, target):
        tile = {k: v for k, v in c.items() if k != "kv_splits"}
        if tile not in tiles:
            tiles.append(tile)
    configs = [{**t, "kv_splits": s} for t in tiles[:DECODE_TILES] for s in KV_SPLITS]
    return [c for c in configs if space.why_invalid(c) is None]


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _row(problem: AttentionProblem, label: str, ev: Any, extra: dict | None = None) -> dict[str, Any]:
    med = median_ms(ev)
    s = summarize(ev.samples.times_ms) if med else None
    row = {"name": label, "status": ev.status.value, "reason": ev.reason, "rel_error": ev.rel_error,
           "median_ms": med, "cv": s.cv if s else None, "n": s.n if s else 0,
           "tflops": problem.flops / (med * 1e-3) / 1e12 if med else None,
           "samples_ms": list(ev.samples.times_ms) if ev.samples else [], **(extra or {})}
    log(f"  {label}: {row['status']} {med and round(med, 4)} ms {row['tflops'] and round(row['tflops'], 1)} TFLOP/s "
        f"err {ev.rel_error} {ev.reason[:200]}")
    return row


def measure(backend: OpBackend, problem: AttentionProblem, target: Any, configs: list[dict] | None = None
            ) -> dict[str, Any]:
    configs = hand_picked(problem, target) if configs is None else configs
    built = compile_all(backend, [(problem, c) for c in configs], target)
    baselines: dict[str, list[dict]] = {}

    def baseline(name: str) -> None:
        try:
            label, ev = backend.baseline(problem, target, policy=POLICY, seed=1, name=name)
            baselines.setdefault(name, []).append(_row(problem, label, ev))
        except Exception as e:  # a backend torch refuses for this shape is a finding, not the end of the run
            baselines.setdefault(name, []).append({"name": name, "status": "error", "reason": str(e)[:300]})
            log(f"  {name}: error {str(e)[:200]}")

    baseline("sdpa")
    rows = []
    for config, (artifact, error) in zip(configs, built):
        if artifact is None:
            rows.append({"name": label(config), "config": config, "status": "compile_error", "reason": error[:300]})
            log(f"  {label(config)}: compile_error {error[:300]}")
            continue
        ev = backend.evaluate(artifact, problem, target, policy=POLICY, seed=1)
        rows.append(_row(problem, label(config), ev, {"config": config, **resources_of(artifact)}))
    for name in PINNED:
        baseline(name)
    baseline("sdpa")
    default_ms = [r["median_ms"] for r in baselines["sdpa"] if r.get("median_ms")]
    timed = [r for r in rows if r.get("median_ms")]
    best = min(timed, key=lambda r: r["median_ms"], default=None)
    result = {"problem": problem.label, "rows": rows, "baselines": baselines,
              "default_ms": min(default_ms) if default_ms else None, "best": best["name"] if best else None,
              "best_ms": best["median_ms"] if best else None}
    if best:
        result["ratios"] = {name: (runs[0]["median_ms"] / best["median_ms"] if runs[0].get("median_ms") else None)
                            for name, runs in baselines.items() if name != "sdpa"}
        result["ratios"]["sdpa"] = result["default_ms"] / best["median_ms"] if result["default_ms"] else None
        ran = {name: min(x["median_ms"] for x in runs if x.get("median_ms")) for name, runs in baselines.items()
               if any(x.get("median_ms") for x in runs)}  # each backend's best median, those that ran
        if ran:
            fastest = min(ran, key=ran.get)
            fastest_ms = ran[fastest]
            result["fastest_sdpa"], result["fastest_sdpa_ms"] = fastest, fastest_ms
            result["ratios"]["fastest"] = fastest_ms / best["median_ms"]
    by_split: dict[int, float] = {}
    for r in timed:
        k = int(r.get("config", {}).get("kv_splits", 1))
        by_split[k] = min(by_split.get(k, r["median_ms"]), r["median_ms"])
    result["best_ms_by_kv_splits"] = dict(sorted(by_split.items()))
    return result


def render(results: list[dict], meta: dict) -> str:
    lines = ["# attention on the GPU: the FA2-style family against torch SDPA (issue 16)", "", *provenance_lines(meta),
             "- method: per problem in one process: SDPA default, every hand-picked fa2 configuration, SDPA pinned to "
             "cudnn, flash, efficient, SDPA default again; every kernel and baseline checked against the float64 "
             "reference before it is timed (CUDA events, median). ratio = the library's median / ours (> 1: ours "
             "faster); for the default the faster of its two runs.", "",
             "| problem | best fa2 | ms | TFLOP/s | SDPA default (ran) ms | x default | x cudnn | x flash | "
             "x efficient |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        if "rows" not in r:
            lines.append(f"| {r['problem']} | {r.get('error', '')} | | | | | | | |")
            continue
        ratios = r.get("ratios", {})
        best = next((x for x in r["rows"] if x["name"] == r.get("best")), {})
        ran = r["baselines"]["sdpa"][0].get("name", "")
        lines.append(f"| {r['problem']} | {r.get('best') or ''} | {num(r.get('best_ms'), 3)} | "
                     f"{num(best.get('tflops'), 1)} | {num(r.get('default_ms'), 3)} ({ran}) | "
                     + " | ".join(num(ratios.get(n), 2) for n in ("sdpa", *PINNED)) + " |")
    for r in results:
        if "rows" not in r:
            continue
        lines += ["", f"## {r['problem']}", "", "| what | status | ms | TFLOP/s | cv | rel. error | regs | spill B | "
                  "reason |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        every = [x for runs in r["baselines"].values() for x in runs] + r["rows"]
        for x in every:
            lines.append(f"| {x['name']} | {x['status']} | {num(x.get('median_ms'), 4)} | {num(x.get('tflops'), 1)} | "
                         f"{num(x.get('cv'), 3)} | {x.get('rel_error', '')} | {x.get('registers', '')} | "
                         f"{x.get('spill_bytes', '')} | {str(x.get('reason', ''))[:200]} |")
    return "\n".join(lines) + "\n"


def render_decode(results: list[dict], meta: dict) -> str:
    """The decode section's report: per problem the best fa2 median per kv_splits and against SDPA's backends."""
    lines = ["# attention decode on the GPU: split-KV fa2 against torch SDPA's backends (issue 16)", "",
             *provenance_lines(meta),
             "- method: per problem in one process: SDPA default, every fa2 candidate (three tiles x kv_splits "
             f"{', '.join(map(str, KV_SPLITS))}), SDPA pinned to cudnn, flash, efficient, SDPA default again; every "
             "kernel and baseline checked against the float64 reference before it is timed (CUDA events, median). "
             "fastest SDPA = the fastest backend that ran; x = its median / ours (> 1: ours faster).", "",
             "| problem | best fa2 | ms | " + " | ".join(f"kv{k} ms" for k in KV_SPLITS) +
             " | fastest SDPA ms | x fastest | x cudnn | x flash | x efficient |",
             "| --- | --- | --- | " + " | ".join("---" for _ in KV_SPLITS) + " | --- | --- | --- | --- | --- |"]
    for r in results:
        if "rows" not in r:
            lines.append(f"| {r['problem']} | {r.get('error', '')} |" + " |" * (len(KV_SPLITS) + 6))
            continue
        ratios, split = r.get("ratios", {}), {int(k): v for k, v in r.get("best_ms_by_kv_splits", {}).items()}
        fastest = f"{num(r.get('fastest_sdpa_ms'), 4)} ({r.get('fastest_sdpa', '')})" if r.get("fastest_sdpa") else ""
        lines.append(f"| {r['problem']} | {r.get('best') or ''} | {num(r.get('best_ms'), 4)} | "
                     + " | ".join(num(split.get(k), 4) for k in KV_SPLITS) + f" | {fastest} | "
                     + " | ".join(num(ratios.get(n), 2) for n in ("fastest", *PINNED)) + " |")
    detail = render(results, meta).split("\n## ", 1)
    if len(detail) == 2:
        lines += ["", "## " + detail[1].rstrip("\n")]
    return "\n".join(lines) + "\n"


def render_wgmma(results: list[dict], meta: dict) -> str:
    """The wgmma section's report: per problem the best fa3 and the fa2 pick against SDPA's backends."""
    lines = ["# attention on the GPU: the FA3-style family (fa3, sm_90a) against fa2 and torch SDPA", "",
             *provenance_lines(meta),
             "- method: per problem in one process: SDPA default, every hand-picked fa3 configuration and the first "
             "fa2 hand-pick, SDPA pinned to cudnn, flash, efficient, SDPA default again; every kernel and baseline "
             "checked against the float64 reference before it is timed (CUDA events, median). x = the library's "
             "median / the best fa3's (> 1: fa3 faster).", "",
             "| problem | best fa3 | ms | TFLOP/s | fa2 ms | SDPA default ms | cudnn ms | x default | x cudnn | "
             "x flash | x efficient | fa3 wrong or failed |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        if "rows" not in r:
            lines.append(f"| {r['problem']} | {r.get('error', '')} |" + " |" * 10)
            continue
        fa3 = [x for x in r["rows"] if x.get("config", {}).get("family") == wgmma_space.FAMILY]
        fa2 = [x for x in r["rows"] if x.get("config", {}).get("family") != wgmma_space.FAMILY]
        best = min((x for x in fa3 if x.get("median_ms")), key=lambda x: x["median_ms"], default=None)
        failed = sum(1 for x in fa3 if x.get("status") != "ok")
        cudnn = r["baselines"].get("sdpa-cudnn", [{}])[0].get("median_ms")
        ratio = {n: (runs[0].get("median_ms") / best["median_ms"] if best and runs[0].get("median_ms") else None)
                 for n, runs in r["baselines"].items()}
        if best and r.get("default_ms"):
            ratio["sdpa"] = r["default_ms"] / best["median_ms"]
        lines.append(f"| {r['problem']} | {best['name'] if best else ''} | {num(best and best['median_ms'], 3)} | "
                     f"{num(best and best.get('tflops'), 1)} | {num(fa2[0].get('median_ms') if fa2 else None, 3)} | "
                     f"{num(r.get('default_ms'), 3)} | {num(cudnn, 3)} | "
                     + " | ".join(num(ratio.get(n), 2) for n in ("sdpa", *PINNED)) + f" | {failed} of {len(fa3)} |")
    pairs = [pair for r in results for pair in pingpong_pairs(r)]
    if pairs:
        lines += ["", "## ping-pong: the two consumer warpgroups taking turns (pingpong 1) against the same "
                  "configuration without (ms: medians; gain = without / with, > 1: ping-pong faster; blank: not timed)",
                  "", "| problem | configuration | ms without | ms with | TFLOP/s with | gain |",
                  "| --- | --- | --- | --- | --- | --- |"]
        lines += [f"| {x.problem} | {x.without} | {num(x.without_ms, 3)} | {num(x.with_ms, 3)} | "
                  f"{num(x.with_tflops, 1)} | {num(x.gain, 3)} |" for x in pairs]
    detail = render(results, meta).split("\n## ", 1)
    if len(detail) == 2:
        lines += ["", "## " + detail[1].rstrip("\n")]
    return "\n".join(lines) + "\n"


RENDER = {"prefill": render, "decode": render_decode, "wgmma": render_wgmma}


def run_section(name: str, problems: tuple[AttentionProblem, ...], backend: OpBackend, target: Any, meta: dict,
                out: Path, seconds: float) -> None:
    """Measures `problems` until `seconds` have passed, writing the section's report after every problem."""
    start = time.perf_counter()
    results: list[dict[str, Any]] = []
    md, js = out / f"{STEMS[name]}.md", out / f"{STEMS[name]}.json"
    for problem in problems:
        left = seconds - (time.perf_counter() - start)
        if left < 6:
            results.append({"problem": problem.label, "error": "not run: the run's deadline"})
            continue
        log(f"{problem.label} ({left:.0f} s left)")
        try:
            results.append(measure(backend, problem, target, section_configs(name, problem, target)))
        except Exception as e:  # the next problem still runs
            results.append({"problem": problem.label, "error": f"{type(e).__name__}: {str(e)[:300]}"})
            log(f"  {results[-1]['error']}")
        meta["wall_s"] = time.perf_counter() - start
        md.write_text(RENDER[name](results, meta))
        js.write_text(json.dumps({"meta": meta, "results": results}, indent=1, default=str))
    log(f"wrote {md} and {js} in {time.perf_counter() - start:.0f} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python benchmarks/attention_h200.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/out")))
    parser.add_argument("--section", choices=("all", "prefill", "decode", "wgmma"), default="all",
                        help="all: prefill and decode; wgmma: the fa3 family's problems")
    parser.add_argument("--seconds", type=float, default=None,
                        help="each section's deadline (default 150 s prefill, 300 s decode, 150 s wgmma)")
    parser.add_argument("--dry-run", action="store_true", help="no GPU: compile every candidate for sm_90a")
    args = parser.parse_args(argv)
    sections = ("prefill", "decode") if args.section == "all" else (args.section,)
    backend = OpBackend(OP, "cuda")
    if args.dry_run:
        from dataclasses import replace

        from tracea_cli.target import Target, limits_for

        # the H200's 132 SMs, so that the decode picks split as they would there
        target = Target(backend="cuda", device_class="dry run sm_90a", arch="sm_90a",
                        limits=replace(limits_for("sm_90a"), sm_count=132))
        for section in sections:
            for problem in SECTION_PROBLEMS[section]:
                configs = section_configs(section, problem, target)
                for config, (artifact, error) in zip(configs, compile_all(backend, [(problem, c) for c in configs],
                                                                           target)):
                    log(f"{problem.label}: {label(config)}: {artifact.resources['kernels'] if artifact else error}")
        return 0

    from tracea_cli.backends.cuda import device_target

    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    target = device_target(0)
    for section in sections:
        run_section(section, SECTION_PROBLEMS[section], backend, target, run_meta(target, argv), out,
                    args.seconds or SECONDS[section])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
