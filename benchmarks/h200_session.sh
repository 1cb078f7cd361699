#!/usr/bin/env bash
# One device call that checks and measures what the issues ask of the H200, writing everything under $OUT.
# Usage on the device machine, from the repository root, after installing the carried wheels (../shared/device/README.md):
#   bash benchmarks/h200_session.sh PART     PART: tests | doctor | tune | bench | all
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TRACEA_DATA_DIR=/tmp/tracea-data TRACEA_CACHE_DIR=/tmp/tracea-cache NO_COLOR=1
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
if [[ $part == tune || $part == all ]]; then
  say "tune gemm --m 4096 --dtype bf16 --budget 60"
  stamp > "$OUT/tune_bf16_4096.txt"
  /usr/bin/time -f "wall %e s" python3 -m tracea_cli tune gemm --m 4096 --dtype bf16 --budget 60 --json \
    > "$OUT/tune_bf16_4096.json" 2>> "$OUT/tune_bf16_4096.txt"
  tail -3 "$OUT/tune_bf16_4096.txt"
  python3 - "$OUT/tune_bf16_4096.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
w, b = d["winner"], d["baseline"]
print("winner", w["config"], f"{w['median_ms']:.4f} ms", f"{w.get('tflops', 0):.1f} TFLOP/s")
print("baseline", b["name"], f"{b['median_ms']:.4f} ms", "speed-up", round(b["median_ms"] / w["median_ms"], 3))
print("evaluations", d["evaluations"], "failures", len(d["failures"]), "stopped", d["stopped_because"])
PY
  say "cache hit"
  /usr/bin/time -f "wall %e s" python3 -m tracea_cli tune gemm --m 4096 --dtype bf16 --budget 60 --json > /dev/null 2> "$OUT/tune_hit.txt"; tail -1 "$OUT/tune_hit.txt"
fi
if [[ $part == bench || $part == all ]]; then
  say "bench --report html (default suite, empty cache)"
  rm -rf "$TRACEA_CACHE_DIR"
  stamp > "$OUT/bench.txt"
  /usr/bin/time -f "wall %e s" python3 -m tracea_cli bench --report html --report json --report md --output-dir "$OUT" 2>> "$OUT/bench.txt" | tail -40
  tail -2 "$OUT/bench.txt"
fi
say done
