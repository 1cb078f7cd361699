"""What a memory-bound GEMM can reach under each way of keeping L2 from holding the inputs: the small-M floor.

    python benchmarks/small_m_floor.py OUTPUT.md [--json OUTPUT.json] [--dry-run]

Problem: (16, 4096, 4096) fp16 nn, whose time is reading B (32 MiB). Subjects, each timed with CUDA events around
one launch: an empty kernel (what the events and a launch cost), a plain read of B with no arithmetic at several grid
sizes (what any kernel reading B once can reach), cuBLAS (`cupy.matmul`), and our fastest small-M configurations
(checked against the float64 reference first). Each subject under four ways of preparing a sample:

- write-flush: overwrite a buffer twice the L2's size (what `tracea` does today): L2 is left full of dirty lines,
  which the kernel's reads must write back to memory before they can use the lines;
- read-flush: read a buffer twice the L2's size: L2 is left full of clean lines of that buffer;
- rotate: no flush, the operands rotate through enough copies to exceed L2 (the previous sample's B is clean in L2);
- warm: no flush, the same operands every time (B stays in the L2: not a fair measurement, the upper bound).

The event clock holds the stream until the timed work is queued (`backends/cuda_clock.py`), so a sample holds GPU
time only, in every mode: with nothing queued before it, the start event would fire at once and the sample would
include the host's launch time (the first run of this script, before the clock held the stream, measured an empty
kernel at 6 µs in the two modes without a flush, against 2.8 µs).

The point is the ratio a kernel can reach against cuBLAS under each method: the plain read is the bound.
Needs a GPU, except `--dry-run` (compile the candidates for sm_90 here).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_run import compile_all, describe, num, provenance_lines, run_meta, write_report  # noqa: E402

from tracea_cli.backends.op_backend import OpBackend  # noqa: E402
from tracea_cli.ops.gemm.problem import GemmProblem  # noqa: E402
from tracea_cli.stats import summarize  # noqa: E402
from tracea_cli.timing import TimingPolicy, measure  # noqa: E402

POLICY = TimingPolicy(warmup=10, min_samples=200, max_samples=200, target_cv=0.0, max_seconds=5.0)
COPY_RATE = 4.19e12
PROBLEM = GemmProblem(16, 4096, 4096, "fp16", "nn")
ROTATIONS = 6  # 6 x 32 MiB of B > 2 x the L2
MMA = {"family": "mma", "block_n": 32, "block_k": 256, "warp_n": 32, "split_k": 1, "group_m": 1, "vec": 8}
CANDIDATES = (
    {**MMA, "block_m": 32, "warp_m": 16, "stages": 5, "slice_k": 4},
    {**MMA, "block_m": 32, "warp_m": 32, "stages": 5, "slice_k": 8},
    # 16-row blocks (new: a 32-row block computes 16 padded rows when M = 16)
    {**MMA, "block_m": 16, "warp_m": 16, "stages": 5, "slice_k": 8},
    {**MMA, "block_m": 16, "warp_m": 16, "stages": 5, "slice_k": 4},
    {**MMA, "block_m": 16, "warp_m": 16, "stages": 3, "slice_k": 8},
    {**MMA, "block_m": 16, "warp_m": 16, "stages": 4, "slice_k": 8},
    {**MMA, "block_m": 16, "warp_m": 16, "stages": 5, "slice_k": 8, "block_k": 128},
    {"family": "wgmma", "tile_m": 64, "tile_n": 64, "stages": 6, "consumers": 1, "schedule": "cooperative",
     "cluster_m": 1, "persistent": 0, "group_m": 1, "store": "direct"},
)
READ_SOURCE = r"""
extern "C" __global__ void __launch_bounds__(256) read_all(const uint4* __restrict__ p, unsigned long long n,
                                                           unsigned* out) {
    // Every 16-byte word once, four loads in flight per thread per step; the xor keeps the loads alive.
    unsigned acc = 0;
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) {
        uint4 a = __ldg(p + i), b = __ldg(p + i + stride), c = __ldg(p + i + 2 * stride), d = __ldg(p + i + 3 * stride);
        acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
    }
    for (; i < n; i += stride) { uint4 a = __ldg(p + i); acc ^= a.x ^ a.y ^ a.z ^ a.w; }
    if (acc == 0x9E3779B9u) out[0] = acc;
}
extern "C" __global__ void empty_kernel() {}
"""
READ_GRIDS = (132, 264, 528, 1056, 2112)  # blocks of 256 threads


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("output", type=Path, nargs="?")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args(argv)
    backend = OpBackend("gemm", "cuda")
    if args.dry_run:
        from dataclasses import replace

        from tracea_cli.target import Target, limits_for

        target = Target(backend="cuda", device_class="H200 (dry run)", arch="sm_90",
                        limits=replace(limits_for("sm_90"), sm_count=132))
        for config, (artifact, error) in zip(CANDIDATES, compile_all(backend, [(PROBLEM, c) for c in CANDIDATES], target)):
            print(describe(config), "OK" if artifact else f"COMPILE ERROR {error[:300]}")
        return 0
    if args.output is None:
        parser.error("OUTPUT.md is needed unless --dry-run")

    import cupy
    import numpy as np

    from tracea_cli.backends import cuda
    from tracea_cli.backends.checked import poison, upload
    from tracea_cli.backends.cuda_clock import CudaEventClock
    from tracea_cli.ops.dtypes import from_storage
    from tracea_cli.ops.gemm.op import OP
    from tracea_cli.ops.verify import check

    target = cuda.device_target(0)
    meta = run_meta(target, argv)
    l2 = int(cupy.cuda.Device().attributes["L2CacheSize"])
    module = cupy.RawModule(code=READ_SOURCE)
    read_all, empty = module.get_function("read_all"), module.get_function("empty_kernel")
    sink = cupy.zeros(1, dtype=cupy.uint32)
    flush_words = 2 * l2 // 16
    flush_buffer = cupy.ones(flush_words * 4, dtype=cupy.uint32)

    def read(buffer, blocks: int):
        words = buffer.nbytes // 16
        return lambda: read_all((blocks,), (256,), (buffer, np.uint64(words), sink))

    inputs = OP.make_inputs(PROBLEM, cupy.random.RandomState(1))  # made on the GPU, as the checked path does
    ref = OP.reference(PROBLEM, inputs)["C"]
    copies = [upload(cupy, PROBLEM.tensors(), inputs, PROBLEM.dtype) for _ in range(ROTATIONS)]  # "A", "B", "C"
    state = {"i": 0}

    def current():
        return copies[state["i"]]

    def advance(index):
        return lambda: state.__setitem__("i", index(state["i"]))

    prepares = {
        "write-flush": lambda: flush_buffer.fill(0),
        "read-flush": read(flush_buffer, 1056),
        "rotate": advance(lambda i: (i + 1) % ROTATIONS),
        "warm": advance(lambda i: 0),
    }

    subjects: list[tuple[str, callable]] = [("empty kernel", lambda: empty((1,), (32,), ()))]
    subjects += [(f"read B, {g} blocks x 256", (lambda g=g: read_all((g,), (256,), (current()["B"], np.uint64(current()["B"].nbytes // 16), sink))))
                 for g in READ_GRIDS]
    subjects.append(("cuBLAS (cupy.matmul)", lambda: cupy.matmul(current()["A"], current()["B"], out=current()["C"])))

    built = compile_all(backend, [(PROBLEM, c) for c in CANDIDATES], target)
    notes = []
    for config, (artifact, error) in zip(CANDIDATES, built):
        if artifact is None:
            notes.append(f"{describe(config)}: compile error {error[:200]}")
            continue
        loaded, family = cuda.load(artifact), backend.family_of(config)
        launches = [cuda.bind(loaded, family.args(PROBLEM, ops)) for ops in copies]  # one launcher per copy
        run = (lambda launches=launches: launches[state["i"]]())
        for i in range(ROTATIONS):  # every copy's result checked before anything is timed
            state["i"] = i
            poison(copies[i]["C"], PROBLEM.dtype)
            run()
            verdict = check(from_storage(copies[i]["C"], PROBLEM.dtype), ref, PROBLEM.dtype)
            if not verdict.ok:
                notes.append(f"{describe(config)}: wrong result on copy {i}: {verdict.reason}")
                break
        else:
            subjects.append((describe(config), run))
    for i in range(ROTATIONS):
        state["i"] = i
        poison(copies[i]["C"], PROBLEM.dtype)
        cupy.matmul(copies[i]["A"], copies[i]["B"], out=copies[i]["C"])
        verdict = check(from_storage(copies[i]["C"], PROBLEM.dtype), ref, PROBLEM.dtype)
        assert verdict.ok, verdict.reason
    state["i"] = 0

    rows = []
    for name, run in subjects:
        row = {"subject": name, "modes": {}}
        for mode, prepare in prepares.items():
            state["i"] = 0
            samples = measure(run, clock=CudaEventClock(), policy=POLICY, prepare=prepare)
            s = summarize(samples.times_ms)
            row["modes"][mode] = {"median_ms": s.median, "q1": s.q1, "q3": s.q3, "n": s.n,
                                  "samples_ms": list(samples.times_ms)}
        rows.append(row)
        print(name, {m: round(v["median_ms"] * 1e3, 2) for m, v in row["modes"].items()}, "us", flush=True)
    result = {"problem": PROBLEM.as_dict(), "l2_bytes": l2, "rows": rows, "notes": notes,
              "floor_ms": (PROBLEM.m * PROBLEM.k + PROBLEM.k * PROBLEM.n + PROBLEM.m * PROBLEM.n) * 2 / COPY_RATE * 1e3}
    write_report([result], meta, render, args.output, args.json)
    print(f"wrote {args.output}")
    return 0


def render(results: list[dict], meta: dict) -> str:
    r = results[0]
    modes = list(r["rows"][0]["modes"])
    cublas = next(row for row in r["rows"] if row["subject"].startswith("cuBLAS"))["modes"]
    lines = ["# Small-M floor: what reading B costs under each way of flushing L2", "", *provenance_lines(meta),
             f"- problem: {r['problem']}; L2 {r['l2_bytes'] / 2**20:.0f} MiB; bytes floor {num(r['floor_ms'] * 1e3, 2)} us "
             f"at {COPY_RATE / 1e12:.2f} TB/s",
             f"- method: CUDA events around one launch, {POLICY.warmup} warm-up runs, {POLICY.max_samples} samples, "
             "medians in microseconds [quartiles]; ratio = cuBLAS median / subject median under the same method. "
             "Every GEMM checked against the float64 reference on every operand copy before timing.", "",
             "| subject | " + " | ".join(modes) + " | " + " | ".join(f"ratio ({m})" for m in modes) + " |",
             "| --- |" + " --- |" * (2 * len(modes))]
    for row in r["rows"]:
        cells = [f"{num(v['median_ms'] * 1e3, 2)} [{num(v['q1'] * 1e3, 1)}-{num(v['q3'] * 1e3, 1)}]" for v in row["modes"].values()]
        ratios = [num(cublas[m]["median_ms"] / row["modes"][m]["median_ms"], 2) for m in modes]
        lines.append(f"| {row['subject']} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
    lines += [f"\nLeft out: {n}" for n in r["notes"]]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
