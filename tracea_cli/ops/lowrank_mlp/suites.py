"""lowrank-mlp's rows of the built-in bench suites.

GPU: `default` has issue 15's benchmark shapes (M ∈ {4096, 16384} × rank ∈ {64, 256, 512}, fp16, d = 4096, SiLU
with bias); `lowrank-mlp` those, the same shapes' bf16 and fp32 rows at rank 64 and 256, and an
awkward shape (M no tile divides, rank 100, d_in ≠ d_out, residual). CPU: a small layer in `default` and a few more
in `lowrank-mlp` (fp64, layout nt, an awkward shape), each a fraction of a second on two cores."""

from __future__ import annotations

from tracea_cli.ops.lowrank_mlp.problem import LowrankMlpProblem


def _layer(m: int, d: int, rank: int, dtype: str, **fields) -> LowrankMlpProblem:
    return LowrankMlpProblem(m, d, rank, fields.pop("d_out", d), dtype, act=fields.pop("act", "silu"), **fields)


_GPU_TARGETS = tuple(_layer(m, 4096, r, "fp16") for m in (4096, 16384) for r in (64, 256, 512))
_GPU_DEFAULT = _GPU_TARGETS
_GPU_OWN = (
    *_GPU_TARGETS,
    *(_layer(16384, 4096, r, dt) for dt in ("bf16", "fp32") for r in (64, 256)),
    _layer(16384, 4096, 64, "fp16", intermediate="fp32"),
    _layer(16384, 4096, 64, "fp16", layout="nt"),
    _layer(3000, 1000, 100, "fp16", d_out=1500, act="gelu", residual=True),
)
_CPU_DEFAULT = (_layer(512, 512, 32, "fp32"),)
_CPU_OWN = (
    *_CPU_DEFAULT,
    _layer(2048, 1024, 64, "fp32"),
    _layer(2048, 1024, 64, "fp32", layout="nt"),
    _layer(1024, 512, 32, "fp64", act="gelu"),
    _layer(1000, 300, 48, "fp32", d_out=500, act="relu", residual=True),
)
_ROWS = {("default", "cuda"): _GPU_DEFAULT, ("lowrank-mlp", "cuda"): _GPU_OWN,
         ("default", "cpu"): _CPU_DEFAULT, ("lowrank-mlp", "cpu"): _CPU_OWN}


def suite(name: str, backend: str, dtypes: tuple[str, ...]) -> tuple[LowrankMlpProblem, ...]:
    """The rows of suite `name` for `backend` in the dtypes the device runs (others left out)."""
    return tuple(p for p in _ROWS.get((name, backend), ()) if p.dtype in dtypes)
