"""GEMM's rows of the built-in bench suites: `quick` (seconds, CI), `default` (what a user wants first) and `gemm`
(the benchmark shapes the issues and docs/results measure: squares, LLM-like layers, small M, tall-skinny, awkward,
ragged)."""

from __future__ import annotations

from tracea_cli.ops.gemm.problem import GemmProblem

# (m, n, k, dtype, layout). LLM-like shapes take B as N×K (nt), as torch.nn.Linear stores weights.
_GPU_QUICK = ((1024, 1024, 1024, "fp32", "nn"), (1024, 1024, 1024, "bf16", "nn"))
_CPU_QUICK = ((128, 128, 128, "fp32", "nn"), (256, 256, 256, "fp32", "nn"))
_GPU_DEFAULT = (
    (2048, 2048, 2048, "fp32", "nn"),
    (4096, 4096, 4096, "fp32", "nn"),
    (4096, 4096, 4096, "tf32", "nn"),
    (4096, 4096, 4096, "fp16", "nn"),
    (4096, 4096, 4096, "bf16", "nn"),
    (8192, 8192, 8192, "bf16", "nn"),
    (4096, 7168, 2048, "bf16", "nt"),
    (4096, 2112, 7168, "bf16", "nt"),
    (4096, 4096, 7168, "bf16", "nt"),
    (4096, 32768, 512, "bf16", "nt"),
    (16, 4096, 4096, "bf16", "nt"),  # small M: decoding one token for 16 sequences
    (1000, 3000, 777, "fp16", "nn"),  # awkward: no dimension a multiple of 64
)
_CPU_DEFAULT = (
    (512, 512, 512, "fp32", "nn"),
    (1024, 1024, 1024, "fp32", "nn"),
    (2048, 2048, 2048, "fp32", "nn"),
    (512, 512, 512, "fp64", "nn"),
    (1024, 1024, 1024, "fp64", "nn"),
)
_GPU_GEMM = (
    *((s, s, s, dt, "nn") for dt in ("fp16", "bf16") for s in (1024, 2048, 4096, 6144, 8192)),
    *((s, s, s, dt, "nn") for dt in ("fp32", "tf32") for s in (2048, 4096, 8192)),
    *((m, n, k, dt, "nt") for dt in ("fp16", "bf16")
      for m, n, k in ((4096, 7168, 2048), (4096, 2112, 7168), (4096, 4096, 7168), (4096, 32768, 512))),
    *((m, 4096, 4096, "bf16", "nt") for m in (1, 16, 128)),
    (32768, 768, 768, "bf16", "nt"),  # tall-skinny
    (1000, 3000, 777, "fp16", "nn"),
    (1000, 3000, 777, "bf16", "nn"),
    # ragged: no dimension a multiple of 16 bytes (issue 17; benchmarks/gemm_ragged_h200.py)
    *((m, n, k, dt, "nn") for dt in ("fp16", "bf16")
      for m, n, k in ((3001, 5003, 2999), (4095, 4097, 4091), (12345, 4096, 1000))),
)
_CPU_GEMM = (*_CPU_DEFAULT, (2048, 2048, 2048, "fp64", "nn"), (1, 2048, 2048, "fp32", "nn"), (1000, 300, 777, "fp32", "nt"))

_ROWS = {
    ("quick", "cpu"): _CPU_QUICK, ("quick", "cuda"): _GPU_QUICK,
    ("default", "cpu"): _CPU_DEFAULT, ("default", "cuda"): _GPU_DEFAULT,
    ("gemm", "cpu"): _CPU_GEMM, ("gemm", "cuda"): _GPU_GEMM,
}


def _gpu_dtype(wanted: str, dtypes: tuple[str, ...]) -> str | None:
    """The dtype to use for `wanted` on a device that has `dtypes`: bf16 falls back to fp16, tf32 to nothing."""
    if wanted in dtypes:
        return wanted
    if wanted == "bf16" and "fp16" in dtypes:
        return "fp16"
    return None


def suite(name: str, backend: str, dtypes: tuple[str, ...]) -> tuple[GemmProblem, ...]:
    """The rows of suite `name` for `backend`, each in a dtype the device runs (or left out), each once."""
    rows: list[tuple[int, int, int, str, str]] = []
    for m, n, k, dtype, layout in _ROWS.get((name, backend), ()):
        chosen = _gpu_dtype(dtype, dtypes) if backend == "cuda" else (dtype if dtype in dtypes else None)
        if chosen and (m, n, k, chosen, layout) not in rows:
            rows.append((m, n, k, chosen, layout))
    return tuple(GemmProblem(m, n, k, dtype, layout) for m, n, k, dtype, layout in rows)
