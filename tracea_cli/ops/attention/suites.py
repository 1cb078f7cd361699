"""attention's rows of the built-in bench suites.

GPU: `default` has issue 16's sweep: head dim 64 and 128, L ∈ {1024, 4096, 16384} with 16384 tokens per batch (B =
16384 / L), H chosen so that H·D = 2048 (32 heads of 64, 16 of 128), bf16, causal and not: twelve rows.
`attention` adds the targets beside it: B = 4, H = 16, L = 4096 at head dim 128 and 64 in bf16 and fp16, grouped-
query attention (32 query heads, 8 key/value heads), decode (L_q = 1 against L_k = 8192), the blhd layout, lse and a
length no block divides. CPU: one small problem in `default` and a few more in `attention` (fp64, GQA, causal cross
attention, blhd), each well under a second on two cores."""

from __future__ import annotations

from tracea_cli.ops.attention.problem import AttentionProblem

TOKENS = 16384  # per batch of the default sweep
WIDTH = 2048  # H·D of the default sweep


def _attn(batch: int, heads: int, seq: int, d: int, dtype: str = "bf16", **fields) -> AttentionProblem:
    return AttentionProblem(batch, heads, seq, d, fields.pop("kv_heads", heads), fields.pop("seq_k", seq), dtype,
                            **fields)


_GPU_DEFAULT = tuple(_attn(TOKENS // seq, WIDTH // d, seq, d, causal=causal)
                     for d in (64, 128) for seq in (1024, 4096, 16384) for causal in (False, True))
_GPU_OWN = (
    *_GPU_DEFAULT,
    *(_attn(4, 16, 4096, d, dt, causal=causal) for dt in ("bf16", "fp16") for d in (128, 64)
      for causal in (False, True)),
    _attn(4, 32, 4096, 128, kv_heads=8),
    _attn(4, 32, 4096, 128, kv_heads=8, causal=True),
    _attn(8, 32, 1, 128, kv_heads=8, seq_k=8192),
    _attn(8, 32, 1, 128, kv_heads=8, seq_k=8192, causal=True),
    _attn(4, 16, 4096, 128, layout="blhd", causal=True),
    _attn(4, 16, 4096, 128, lse=True, causal=True),
    _attn(2, 16, 4097, 128, causal=True),
    _attn(2, 8, 2048, 256),
)
_CPU_DEFAULT = (_attn(1, 4, 256, 64, "fp32"),)
_CPU_OWN = (
    *_CPU_DEFAULT,
    _attn(1, 4, 256, 64, "fp32", causal=True),
    _attn(1, 8, 200, 128, "fp32", kv_heads=2, causal=True, lse=True),
    _attn(2, 4, 100, 64, "fp64", seq_k=300, causal=True),
    _attn(1, 4, 256, 64, "fp32", layout="blhd"),
)
_ROWS = {("default", "cuda"): _GPU_DEFAULT, ("attention", "cuda"): _GPU_OWN,
         ("default", "cpu"): _CPU_DEFAULT, ("attention", "cpu"): _CPU_OWN}


def suite(name: str, backend: str, dtypes: tuple[str, ...]) -> tuple[AttentionProblem, ...]:
    """The rows of suite `name` for `backend` in the dtypes the device runs (others left out)."""
    return tuple(p for p in _ROWS.get((name, backend), ()) if p.dtype in dtypes)
