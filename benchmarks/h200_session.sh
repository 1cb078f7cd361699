#!/usr/bin/env bash
# One device call that checks and measures what the issues ask of the H200, writing everything under $OUT.
# Usage on the device machine, from the repository root, after installing the carried wheels (../shared/device/README.md):
#   bash benchmarks/h200_session.sh PART     PART: tests | doctor | tune | weak | warm | defaults | hopper | engine | multi | bench | bench2 | api | resnet | ray | conv2d-tune | splitk | ragged | ragged-fp32 | ragged-tune | fp32-x3 | regress | regress-engine | followup | splitk-wgmma | fixed-cost | all
# (ray needs Ray unpacked on the path: ../shared/device/prep-ray.sh says how)
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TRACEA_DATA_DIR=${TRACEA_DATA_DIR:-/tmp/tracea-data} TRACEA_CACHE_DIR=${TRACEA_CACHE_DIR:-/tmp/tracea-cache} NO_COLOR=1
part=${1:-all}
say() { echo "== $(date -u +%H:%M:%S) $*"; }
stamp() { { date -u +%Y-%m-%dT%H:%M:%SZ; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; } 2>&1; }

if [[ $part == tests || $part == all ]]; then
  say "GPU tests"
  timeout 300 python3 -m pytest -q -m gpu -p no:cacheprovider tests 2>&1 | tee "$OUT/gpu_tests.log" | tail -25
fi
if [[ $part == doctor || $part == all ]]; then
  say "doctor against plain CuPy"
  timeout 150 python3 benchmarks/doctor_h200.py "$OUT/doctor_h200.md" 2>&1 | tail -15
fi
# tune_case NAME ARGS...: `tracea tune gemm ARGS --json` into $OUT/NAME.json, its timing into $OUT/NAME.txt, a summary.
tune_case() {
  local name=$1; shift
  stamp > "$OUT/$name.txt"
  /usr/bin/time -f "wall %e s" python3 -m tracea_cli tune gemm "$@" --json > "$OUT/$name.json" 2>> "$OUT/$name.txt"
  tail -1 "$OUT/$name.txt"
  python3 - "$OUT/$name.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
w, b = d["winner"], d["baseline"]
print("winner", w["config"], f"{w['median_ms']:.4f} ms", f"{w.get('tflops', 0):.1f} TFLOP/s")
if b:
    print("baseline", b.get("name"), f"{b['median_ms']:.4f} ms", "speed-up", round(b["median_ms"] / w["median_ms"], 3))
print("evaluations", d["evaluations"], "failures", len(d["failures"]), "stopped", d["stopped_because"])
PY
}

if [[ $part == tune || $part == all ]]; then
  say "tune gemm --m 4096 --dtype bf16 --budget 60"
  tune_case tune_bf16_4096 --m 4096 --dtype bf16 --budget 60
  say "cache hit"
  /usr/bin/time -f "wall %e s" python3 -m tracea_cli tune gemm --m 4096 --dtype bf16 --budget 60 --json > /dev/null 2> "$OUT/tune_hit.txt"; tail -1 "$OUT/tune_hit.txt"
fi
if [[ $part == weak || $part == all ]]; then
  say "where cuBLAS is weak: small M and an awkward shape (fp16), every family"
  tune_case tune_small_m_fp16 --m 16 --n 4096 --k 4096 --dtype fp16 --budget 40
  tune_case tune_awkward_fp16 --m 1000 --n 3000 --k 777 --dtype fp16 --budget 40
fi
if [[ $part == warm || $part == all ]]; then
  say "warm start (bf16, M = 1024/4096 cached, then 2048)"
  timeout 300 python3 benchmarks/warm_start.py --backend cuda --dtype bf16 --out "$OUT/warm_start_h200.md" 2>&1 | tail -8
fi
if [[ $part == defaults || $part == all ]]; then
  say "verify the shipped sm_90 default configurations on this GPU"
  timeout 200 python3 benchmarks/gemm_defaults.py verify --write 2>&1 | tail -15
  cp profiles/defaults/gemm.json "$OUT/defaults_gemm.json"
  timeout 150 python3 benchmarks/gemm_defaults.py verify --op attention --write 2>&1 | tail -12
  cp profiles/defaults/attention.json "$OUT/defaults_attention.json"
fi
if [[ $part == hopper || $part == all ]]; then
  say "Hopper family against cuBLAS (targets of the Hopper issue)"
  python3 benchmarks/gemm_hopper.py --out "$OUT/hopper" --budget-s 230 2>&1 | tail -30
fi
if [[ $part == engine || $part == all ]]; then
  say "engine: hand-picked configurations per dtype and layout at 4096^3 against cuBLAS"
  timeout 240 python3 benchmarks/gemm_engine.py "$OUT/gemm_engine_h200.md" --dtypes fp32,tf32,fp16,bf16 --layouts nn,nt \
    --configs 8 --json "$OUT/gemm_engine_h200.json" 2>&1 | grep -E "^gemm|best share|Error|error:|Traceback"
fi
if [[ $part == multi || $part == all ]]; then
  say "tune on every GPU of the host (--device all)"
  tune_case tune_multi_device --m 4096 --dtype fp16 --layout nt --device all --budget 48
  python3 -c "import json,sys; print('per device', json.load(open(sys.argv[1]))['per_device'])" "$OUT/tune_multi_device.json"
fi
if [[ $part == bench || $part == all ]]; then
  say "bench --report html (default suite, empty cache)"
  rm -rf "$TRACEA_CACHE_DIR"
  stamp > "$OUT/bench.txt"
  /usr/bin/time -f "wall %e s" python3 -m tracea_cli bench --report html --report json --report md --output-dir "$OUT" 2>> "$OUT/bench.txt" | tail -40
  tail -2 "$OUT/bench.txt"
fi
if [[ $part == bench2 || $part == all ]]; then
  say "bench again on the same machine (cache warm), compared with the first run"
  mkdir -p /tmp/second
  first=$(ls "$OUT"/bench-*.json | head -1)
  stamp > /tmp/second/bench2.txt
  /usr/bin/time -f "wall %e s" python3 -m tracea_cli bench --compare "$first" --report json --report md --output-dir /tmp/second \
    2>> /tmp/second/bench2.txt | tail -40
  echo "exit $?" >> /tmp/second/bench2.txt; tail -3 /tmp/second/bench2.txt
  cp "$TRACEA_CACHE_DIR"/tuning.sqlite3 /tmp/second/ 2>/dev/null
  tar -czf "$OUT/bench_second.tgz" -C /tmp/second .
fi
say done
if [[ $part == api ]]; then
  say "Python API: GPU and torch tests, the seed's snippet twice, host overhead per call"
  timeout 400 python3 -m pytest -q -p no:cacheprovider tests/api -k "gpu or torch or seed" 2>&1 | tee "$OUT/api_tests.log" | tail -15
  printf 'import tracea\nctx = tracea.Context()\ngraph = tracea.Graph()\ngraph.add_gemm(m=2048, n=2048, k=2048)\nconfig = ctx.optimize_graph(graph)\nprint(config)\n' > /tmp/seed.py
  for i in 1 2; do stamp >> "$OUT/seed_snippet.txt"; /usr/bin/time -f "wall %e s" python3 /tmp/seed.py >> "$OUT/seed_snippet.txt" 2>&1; tail -3 "$OUT/seed_snippet.txt"; done
  timeout 120 python3 benchmarks/api_overhead.py "$OUT/api_overhead_h200.md" 2>&1 | tail -8
fi
if [[ $part == splitk ]]; then
  say "conv2d serial split-K: its GPU tests, then reduce against serial per routed call (host and GPU us)"
  timeout 300 python3 -m pytest -q -m gpu -p no:cacheprovider tests/engine_cuda/test_conv2d_gpu.py -k serial 2>&1 | tee "$OUT/splitk_gpu_tests.log" | tail -15
  timeout 240 python3 benchmarks/conv_call_parts.py --out "$OUT/conv_call_parts_splitk.md" 2>&1 | tail -30
fi
if [[ $part == resnet ]]; then
  say "ResNet-50 with patch_conv2d against cudnn.benchmark"
  timeout 560 python3 benchmarks/resnet50_patch.py "$OUT/resnet50_patch_h200.md" --budget ${BUDGET:-8} 2>&1 | tail -30
fi
if [[ $part == ray ]]; then
  # Budget 16 = two GPU batches of 8: the convergence rule (12 evaluations without improvement) cannot stop it earlier,
  # so every run makes the same number of evaluations and wall times compare like for like.
  ray_budget=${RAY_BUDGET:-16}
  say "the same tune through the local executor and through a running one-node Ray cluster (one actor), A B A B A B, each from an empty cache"
  # The `ray` console script is often not on PATH (Ray unpacked beside the checkout): its module is the same CLI.
  if command -v ray > /dev/null; then ray_cli=(ray); else ray_cli=(python3 -m ray.scripts.scripts); fi
  # Ray's actors on this node import Tracea as the driver does: from this checkout.
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
  "${ray_cli[@]}" start --head --num-gpus=1 --include-dashboard=false --disable-usage-stats > "$OUT/ray_start.txt" 2>&1
  tail -2 "$OUT/ray_start.txt"
  n=0
  for executor in local ray local ray local ray; do
    n=$((n + 1))
    export TRACEA_CACHE_DIR=/tmp/tracea-cache-$executor-$n
    extra=(); [[ $executor == ray ]] && extra=(--ray-address auto)
    tune_case "tune_executor_${n}_$executor" --m 4096 --dtype bf16 --budget $ray_budget --executor $executor "${extra[@]}"
    python3 -c "import sqlite3,sys; print('trials in the cache', sqlite3.connect(sys.argv[1]).execute('select count(*), count(distinct config_key) from trials').fetchone())" "$TRACEA_CACHE_DIR/tuning.sqlite3"
  done
  "${ray_cli[@]}" stop > /dev/null 2>&1
  # The table: per run its executor, wall time and winner; then same winner? and Ray's mean wall time against local's.
  python3 - "$OUT" "$ray_budget" <<'PY' | tee "$OUT/ray_vs_local.md"
import json, pathlib, re, statistics, sys
out, budget = pathlib.Path(sys.argv[1]), sys.argv[2]
rows = []
for n, ex in enumerate(["local", "ray"] * 3, 1):
    name = f"tune_executor_{n}_{ex}"
    wall = re.findall(r"wall ([0-9.]+) s", (out / f"{name}.txt").read_text())
    try:
        d = json.loads((out / f"{name}.json").read_text())
        w = d["winner"]
        rows.append((n, ex, float(wall[-1]) if wall else float("nan"), json.dumps(w["config"], sort_keys=True),
                     w["median_ms"], d["evaluations"], d.get("phases_s", {})))
    except (OSError, ValueError, KeyError, TypeError) as e:
        rows.append((n, ex, float(wall[-1]) if wall else float("nan"), f"no result ({type(e).__name__})", float("nan"), 0,
                     {}))
print(f"# tracea tune gemm --m 4096 --dtype bf16 --budget {budget}: local executor against a one-node Ray cluster (one actor)")
print()
names = ["setup", "executor start", "search", "re-time and baseline", "executor close"]
print("| run | executor | wall s | evaluations | winner ms | " + " | ".join(f"{p} s" for p in names)
      + " | outside the phases s | winner |")
print("| --- | --- | --- | --- | --- | " + " | ".join("---" for _ in names) + " | --- | --- |")
for n, ex, wall, cfg, ms, ev, phases in rows:
    cells = " | ".join(f"{phases[p]:.2f}" if p in phases else "?" for p in names)
    print(f"| {n} | {ex} | {wall:.1f} | {ev} | {ms:.4f} | {cells} | {wall - sum(phases.values()):.2f} | `{cfg}` |")
local = [r[2] for r in rows if r[1] == "local"]
ray = [r[2] for r in rows if r[1] == "ray"]
winners = {r[3] for r in rows}
ratio = statistics.mean(ray) / statistics.mean(local)
print()
print(f"- same winner in all {len(rows)} runs: {'yes' if len(winners) == 1 else 'no (' + str(len(winners)) + ' different)'}")
print(f"- evaluations per run: {sorted({r[5] for r in rows})}")
print(f"- Ray's mean wall time / local's: {ratio:.3f} (target <= 1.05: {'met' if ratio <= 1.05 else 'missed'})")
PY
  # the per-run files in one archive (a device call brings back only a few files)
  tar -czf "$OUT/ray_runs.tgz" -C "$OUT" $(cd "$OUT" && ls tune_executor_* ray_start.txt) && rm -f "$OUT"/tune_executor_* "$OUT/ray_start.txt"
fi
if [[ $part == conv2d-tune ]]; then
  say "tracea tune conv2d at budget 40 (fp16, N = 32, 64@56 3x3), empty cache"
  export TRACEA_CACHE_DIR=/tmp/tracea-cache-conv-$RANDOM
  stamp > "$OUT/tune_conv2d.txt"
  /usr/bin/time -f "wall %e s" python3 -m tracea_cli tune conv2d --n 32 --h 56 --w 56 --c 64 --k 64 --r 3 --s 3 --pad 1 \
    --dtype fp16 --budget 40 --json > "$OUT/tune_conv2d.json" 2>> "$OUT/tune_conv2d.txt"
  tail -1 "$OUT/tune_conv2d.txt"
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('winner', d['winner']['median_ms'], 'baseline', d['baseline'], 'evals', d['evaluations'], 'stopped', d['stopped_because'])" "$OUT/tune_conv2d.json"
fi
if [[ $part == ragged ]]; then
  say "wgmma ragged shapes: GPU tests (family and export), then the shapes against cuBLAS"
  # on an H100 (2026-12-07) the 18 family tests and three staged exports took 120 s together (nvcc builds each export)
  timeout 150 python3 -m pytest -q -p no:cacheprovider --tb=short tests/engine_hopper/test_hopper_gpu.py \
    -k "ragged or staged or wrong" 2>&1 | tee "$OUT/ragged_tests.log" | tail -6
  timeout 200 python3 -m pytest -q -p no:cacheprovider --tb=short \
    "tests/export/test_export_staged.py::test_the_exported_staged_gemm_matches_the_reference_on_an_h200" 2>&1 \
    | tee "$OUT/export_staged_tests.log" | tail -12
  timeout 250 python3 benchmarks/gemm_ragged_h200.py --out "$OUT/gemm_ragged.md" --json "$OUT/gemm_ragged.json" 2>"$OUT/gemm_ragged.log"
fi
if [[ $part == ragged-fp32 ]]; then
  say "engine families' staged rows: their GPU tests, fp32 ragged shapes (nn, nt) against SGEMM, tune as typed"
  timeout 200 python3 -m pytest -q -p no:cacheprovider --tb=short tests/engine_cuda/test_cuda_gpu.py \
    tests/export/test_export_engine_staged.py -k staged 2>&1 | tee "$OUT/staged_gpu_tests.log" | tail -6
  for layout in nn nt; do
    timeout 100 python3 benchmarks/gemm_ragged_h200.py --dtypes fp32 --layout $layout --out "$OUT/gemm_ragged_fp32_$layout.md" \
      --json "$OUT/gemm_ragged_fp32_$layout.json" 2>"$OUT/gemm_ragged_fp32_$layout.log"
  done
  tune_case tune_ragged_fp32 --m 4095 --n 4097 --k 4091
fi
if [[ $part == ragged-tune ]]; then
  say "tune a ragged 4k-class shape as a user types it (fp16, default budget)"
  tune_case tune_ragged_fp16 --m 4095 --n 4097 --k 4091 --dtype fp16
fi
if [[ $part == fp32-x3 ]]; then
  say "fp32 as 3xTF32 on mma.sync: its GPU tests (and lowrank's fp32: the same split), against SGEMM, tune as typed"
  timeout 200 python3 -m pytest -q -p no:cacheprovider --tb=short tests/engine_cuda/test_cuda_gpu.py \
    tests/engine_cuda/test_lowrank_mlp_gpu.py -k "fp32_mma or 3xtf32 or (lowrank and fp32)" \
    > "$OUT/x3_gpu_tests.log" 2>&1
  grep -E "failed:|^gemm|^E .*(gemm|lowrank)|passed|failed" "$OUT/x3_gpu_tests.log" | cut -c1-300 | head -30
  # (few files come back from a device call: the benchmarks' progress goes into the tests' log)
  timeout 200 python3 benchmarks/gemm_fp32_h200.py --out "$OUT/gemm_fp32_x3.md" 2>>"$OUT/x3_gpu_tests.log"
  grep -A6 "^| problem" "$OUT/gemm_fp32_x3.md"
  timeout 150 python3 benchmarks/gemm_fp32_h200.py --shapes 4095x4097x4091 3001x5003x2999 \
    --out "$OUT/gemm_fp32_x3_ragged.md" 2>>"$OUT/x3_gpu_tests.log"; grep -A4 "^| problem" "$OUT/gemm_fp32_x3_ragged.md"
  tune_case tune_fp32_2048_x3 --m 2048
  tune_case tune_fp32_ragged_x3 --m 4095 --n 4097 --k 4091
fi
if [[ $part == followup ]]; then
  say "2026-12-07's unmeasured changes: the gemv prefetch against its twins (fp32, 1 and 16 rows), then GEMM rows in bench (first Hopper picks) and lowrank rank 512 (x·U's 2-D grid)"
  timeout 200 python3 benchmarks/gemm_fp32_h200.py --families simt --shapes 1x4096x4096 16x4096x4096 \
    --out "$OUT/gemv_prefetch.md" 2>"$OUT/gemv_prefetch.log"
  grep -A4 "^| problem" "$OUT/gemv_prefetch.md"; grep -A14 "next step's B prefetched" "$OUT/gemv_prefetch.md"
  rm -rf "$TRACEA_CACHE_DIR"  # the bench row tunes from an empty cache, as in the default suite
  for args in "gemm --m 4096 --dtype tf32" "gemm --m 4096 --dtype fp16" "gemm --m 4096 --n 2112 --k 7168 --dtype bf16 --layout nt" \
      "lowrank-mlp --m 4096 --d-in 4096 --rank 512 --act silu --dtype fp16" \
      "lowrank-mlp --m 16384 --d-in 4096 --rank 512 --act silu --dtype fp16"; do
    timeout 120 python3 -m tracea_cli bench $args --report md --output-dir "$OUT" >> "$OUT/followup_bench.txt" 2>&1
  done
  grep -h -E "^\| (gemm|lowrank)|^- (gemm|lowrank)" "$OUT"/bench-*.md
fi
if [[ $part == splitk-wgmma ]]; then
  say "split-K in the wgmma family (unmeasured when written), in priority order within one 600 s call: its GPU tests, the Hopper GEMM and conv2d GPU tests, ResNet-50's late layers at N = 1 and 32 (the picks include K split), a small-M GEMM tune"
  timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider --tb=short -k "split_k or splitk" tests/engine_hopper \
    2>&1 | tee "$OUT/splitk_tests.log" | tail -6
  timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider --tb=line -k "not split_k and not splitk" \
    tests/engine_hopper/test_hopper_gpu.py tests/engine_hopper/test_conv2d_wgmma_gpu.py 2>&1 \
    | tee -a "$OUT/splitk_tests.log" | grep -E "^(FAILED|ERROR)|passed|failed" | tail -10
  for n in 1 32; do
    timeout 95 python3 benchmarks/conv2d_hopper_h200.py --rows late --batch $n --implicit 0 --seconds 70 \
      --out "$OUT/conv_late_n$n.md" --json "$OUT/conv_late_n$n.json" > "$OUT/conv_late_n$n.log" 2>&1
    grep -E "^\| [0-9]" "$OUT/conv_late_n$n.md"; grep -h "split" "$OUT/conv_late_n$n.md" | grep -E "^- " | head -12
  done
  tune_case tune_small_m_bf16 --m 16 --n 4096 --k 4096 --dtype bf16 --layout nt --budget 12  # last: the call's limit may cut it
fi
if [[ $part == fixed-cost ]]; then
  say "where a short convolution's time goes (fixed per launch against per K block; 2026-12-08's K pairs left ~16 us unexplained), then the late layers with every K pair and a fused epilogue"
  timeout 300 python3 benchmarks/conv2d_fixed_cost.py --out "$OUT/conv_fixed_cost.md" --json "$OUT/conv_fixed_cost.json" > "$OUT/conv_fixed_cost.log" 2>&1
  grep -E "^\| (3x3|1x1)" "$OUT/conv_fixed_cost.md"
  timeout 120 python3 benchmarks/conv2d_hopper_h200.py --rows late --batch 32 --implicit 0 --pairs --epilogue bias_residual_relu \
    --seconds 100 --out "$OUT/conv_pairs_fused.md" --json "$OUT/conv_pairs_fused.json" > "$OUT/conv_pairs_fused.log" 2>&1
  grep -E "^\| [0-9]|geometric" "$OUT/conv_pairs_fused.md"
fi
# Every GPU test takes about 10 minutes on an H100 (2026-12-07: 322 tests), past one call's limit: `regress` verifies
# the sm_90 GEMM defaults and runs all but the two largest files, `regress-engine` those two.
ENGINE_GPU_TESTS="tests/engine_cuda/test_cuda_gpu.py tests/engine_cuda/test_device_check_gpu.py"
if [[ $part == regress ]]; then
  say "after an engine template change: verify the sm_90 GEMM defaults, then the GPU tests but $ENGINE_GPU_TESTS"
  timeout 200 python3 benchmarks/gemm_defaults.py verify --write > "$OUT/regress.log" 2>&1; tail -4 "$OUT/regress.log"
  cp profiles/defaults/gemm.json "$OUT/defaults_gemm.json"
  ignore=(); for f in $ENGINE_GPU_TESTS; do ignore+=(--ignore="$f"); done
  timeout 370 python3 -m pytest -q -m gpu -p no:cacheprovider --tb=line "${ignore[@]}" tests >> "$OUT/regress.log" 2>&1
  grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/regress.log" | cut -c1-300 | tail -25
fi
if [[ $part == regress-engine ]]; then
  say "the rest of the GPU tests: $ENGINE_GPU_TESTS"
  timeout 560 python3 -m pytest -q -m gpu -p no:cacheprovider --tb=line $ENGINE_GPU_TESTS > "$OUT/regress_engine.log" 2>&1
  grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/regress_engine.log" | cut -c1-300 | tail -25
fi
