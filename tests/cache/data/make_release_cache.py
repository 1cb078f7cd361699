"""How data/cache-0.1.0-layout2.sqlite3 and data/export-0.1.0-format1.json were made: by the release before ops became
plug-ins (commit ce81493), with its own code and source hashes. Not a test; kept for provenance. To make them again:

    git worktree add /tmp/oldtree ce81493
    python tests/cache/data/make_release_cache.py tests/cache/data/cache-0.1.0-layout2.sqlite3
    (then, with that tree first on sys.path: TuningCache.open(a copy).export(".../export-0.1.0-format1.json"))
"""
import sys
sys.path.insert(0, "/tmp/oldtree")
from pathlib import Path
from tracea_cli.cache import CacheKey, Trial, TuningCache
from tracea_cli.backends.cpu import CpuBackend
from tracea_cli.backends.cuda_gemm import CudaGemmBackend
from tracea_cli.ops.gemm.problem import GemmProblem
from tracea_cli.tune.setup import toolchain

out = Path(sys.argv[1]); out.unlink(missing_ok=True)
MMA = {"family": "mma", "block_m": 128, "block_n": 128, "block_k": 32, "warp_m": 64, "warp_n": 64, "stages": 4,
       "split_k": 1, "group_m": 4, "vec": 8}
SIMT = {"family": "simt", "block_m": 128, "block_n": 128, "block_k": 8, "warp_m": 64, "warp_n": 32, "stages": 2,
        "split_k": 1, "group_m": 8, "vec": 4}
WGMMA = {"family": "wgmma", "tile_m": 128, "tile_n": 256, "stages": 3, "consumers": 2, "schedule": "cooperative",
         "cluster_m": 1, "persistent": 1, "group_m": 8, "store": "tma"}
CPU = {"mr": 6, "nr": 64, "mc": 96, "kc": 256, "nc": 512, "pack_a": True, "parallel": "m", "threads": 2}
rows = [
    # (problem, backend, device class, arch, configs)
    (GemmProblem(2048, 2048, 2048, "fp32"), "cuda", "NVIDIA H200 sm_90 132SM", "sm_90", [SIMT, {**SIMT, "vec": 2}]),
    (GemmProblem(4096, 4096, 4096, "bf16", "nt"), "cuda", "NVIDIA H200 sm_90 132SM", "sm_90", [WGMMA, MMA]),
    (GemmProblem(1024, 1024, 1024, "fp16", "nn", "bias_relu"), "cuda", "NVIDIA A100-SXM4-80GB sm_80 108SM", "sm_80", [MMA]),
    (GemmProblem(512, 512, 512, "fp32"), "cpu", "Intel(R) Xeon(R) Processor | 2 threads | avx512", None, [CPU, {**CPU, "mr": 4, "nr": 32}]),
    (GemmProblem(256, 256, 256, "fp64"), "cpu", "Intel(R) Xeon(R) Processor | 2 threads | avx512", None, [{**CPU, "nr": 32}]),
]
t0 = 1764000000.0
with TuningCache.open(out) as cache:
    for i, (problem, backend, device_class, arch, configs) in enumerate(rows):
        hasher = CudaGemmBackend() if backend == "cuda" else CpuBackend()
        key = CacheKey(op="gemm", backend=backend, dtype=problem.dtype, layout=problem.layout, shape=problem.shape,
                       device_class=device_class, source_hash=hasher.source_hash(problem), toolchain=toolchain(backend),
                       epilogue=problem.epilogue, arch=arch)
        trials = []
        for j, config in enumerate(configs):
            ms = 1.0 + i + 0.5 * j
            t = Trial(config, status="ok", samples_ms=(ms * 0.99, ms, ms * 1.01), median_ms=ms, cv=0.01, rel_error=1e-4,
                      compile_s=0.5, timestamp=t0 + 10 * i + j)
            cache.record_trial(key, t)
            trials.append(t)
        cache.record_trial(key, Trial({**configs[0], "group_m": 1} if "group_m" in configs[0] else {**configs[0], "pack_a": False},
                                      status="wrong_result", reason="relative error 0.3 exceeds the bound", rel_error=0.3,
                                      timestamp=t0 + 10 * i + 9))
        cache.set_winner(key, trials[0])
        cache.set_baseline(key, "cublas" if backend == "cuda" else "numpy",
                           Trial({}, status="ok", samples_ms=(2.0, 2.0, 2.0), median_ms=2.0, cv=0.0, timestamp=t0 + 10 * i + 8))
        cache.record_search(key, strategy="bayes", budget=len(configs) + 1, evaluations=len(configs) + 1, converged=False)
        print(key.id, key.label, key.source_hash)
