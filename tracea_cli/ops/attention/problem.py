"""The attention problem: out = softmax(Q·Kᵀ·scale + mask)·V, one softmax per query row, scale = 1/sqrt(head_dim).

Shapes (layout "bhld", as torch passes them to scaled_dot_product_attention; "blhd" swaps the middle two axes):

    q    B × H × L_q × D
    k    B × H_kv × L_k × D          H_kv divides H: query head h reads key/value head h // (H / H_kv)
    v    B × H_kv × L_k × D
    out  B × H × L_q × D
    lse  B × H × L_q, fp32           where `lse` is on: the natural log of Σ_j exp(s_ij) over the row's visible keys,
                                     s the scaled scores (before the softmax's max is taken out)

The mask is all zeros, or with `causal` the bottom-right aligned causal mask: query row i sees keys j <= i + (L_k −
L_q) (torch.nn.attention.bias.causal_lower_right). L_q > L_k with `causal` would leave rows with no key and is
refused, so every row sees at least one key.

Element strides: the last axis (D) is always contiguous; `strides(tensor)` gives the (batch, head, row) strides of
q, k, v and out in the problem's layout, so one kernel can take both layouts from its arguments.

This module holds the problem's identity, tensors, fresh inputs, float64 reference and work counts; nothing here
imports a backend. The reference works on numpy or CuPy arrays alike.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Mapping

from tracea_cli.errors import UsageError
from tracea_cli.ops.base import Tensor
from tracea_cli.ops.dtypes import array_module, get_dtype, representable

OP_NAME = "attention"
DTYPES = ("bf16", "fp16", "fp32", "fp64")  # fp16 | bf16 on cuda, fp32 | fp64 on the cpu backend
LAYOUTS = ("bhld", "blhd")
HEAD_DIMS = (64, 128, 256)
SIZES = ("batch", "heads", "seq", "head_dim", "kv_heads", "seq_k")
LSE_DTYPE = "fp32"
SEQ_LIMIT = 1 << 20  # a sequence longer than this is almost certainly a typo
COUNT_LIMIT = 1 << 16  # batch, heads, kv_heads
REFERENCE_CHUNK_BYTES = 64 << 20  # the reference's block of scores stays below this where one query row allows


def _check_size(name: str, value: Any, limit: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise UsageError(f"{name} must be a positive whole number, got {value!r}.")
    if value > limit:
        raise UsageError(f"{name} {value} is larger than {limit}; check the size.")


def _check_choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise UsageError(f"unknown {name} {value!r}.", f"Use one of {', '.join(choices)}.")


def layout_shape(layout: str, batch: int, heads: int, length: int, head_dim: int) -> tuple[int, int, int, int]:
    """The shape of one of q, k, v, out in `layout`."""
    return (batch, heads, length, head_dim) if layout == "bhld" else (batch, length, heads, head_dim)


def layout_strides(layout: str, heads: int, length: int, head_dim: int) -> tuple[int, int, int]:
    """(batch, head, row) element strides of a contiguous tensor of `heads` heads and `length` rows in `layout`; the
    head_dim axis has stride 1."""
    if layout == "bhld":
        return (heads * length * head_dim, length * head_dim, head_dim)
    return (length * heads * head_dim, head_dim, heads * head_dim)


@dataclass(frozen=True)
class AttentionProblem:
    batch: int
    heads: int  # query heads H
    seq: int  # L_q
    head_dim: int  # D
    kv_heads: int  # H_kv, divides heads (grouped-query attention)
    seq_k: int  # L_k
    dtype: str = "bf16"
    causal: bool = False  # bottom-right aligned: query row i sees keys j <= i + (seq_k - seq)
    layout: str = "bhld"
    lse: bool = False  # also output each row's natural-log log-sum-exp of its scaled scores, fp32, (B, H, L_q)
    op: str = OP_NAME

    def __post_init__(self) -> None:
        for name in ("batch", "heads", "kv_heads"):
            _check_size(name, getattr(self, name), COUNT_LIMIT)
        for name in ("seq", "seq_k"):
            _check_size(name, getattr(self, name), SEQ_LIMIT)
        if not isinstance(self.head_dim, int) or isinstance(self.head_dim, bool) or self.head_dim not in HEAD_DIMS:
            raise UsageError(f"head_dim must be one of {', '.join(map(str, HEAD_DIMS))}, got {self.head_dim!r}.",
                             "Pad the heads to the next supported size, or use a library call for this one.")
        if self.heads % self.kv_heads:
            raise UsageError(f"kv_heads {self.kv_heads} does not divide heads {self.heads}: grouped-query attention "
                             "shares each key/value head among the same number of query heads.",
                             "Give a kv_heads that divides heads (kv_heads = heads for plain multi-head attention).")
        _check_choice("dtype", self.dtype, DTYPES)
        _check_choice("layout", self.layout, LAYOUTS)
        for name in ("causal", "lse"):
            if not isinstance(getattr(self, name), bool):
                raise UsageError(f"{name} must be true or false, got {getattr(self, name)!r}.")
        if self.causal and self.seq > self.seq_k:
            raise UsageError(f"causal attention with seq {self.seq} > seq_k {self.seq_k} would leave the first "
                             f"{self.seq - self.seq_k} query rows with no key (the mask is aligned bottom-right).",
                             "Use seq <= seq_k with causal, or drop causal.")

    # ---- identity --------------------------------------------------------------------------------------------------

    def key(self) -> dict[str, Any]:
        return {**self.sizes(), "causal": self.causal, "layout": self.layout, "lse": self.lse}

    def sizes(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in SIZES}

    @classmethod
    def from_key(cls, dtype: str, key: Mapping[str, Any]) -> "AttentionProblem":
        expected = {*SIZES, "causal", "layout", "lse"}
        if set(key) != expected:
            raise UsageError(f"an attention problem has {', '.join(sorted(expected))}, not {', '.join(sorted(key))}.")
        return cls(**{name: key[name] for name in expected}, dtype=dtype)

    @property
    def label(self) -> str:
        heads = f"h{self.heads}" if self.kv_heads == self.heads else f"h{self.heads}/kv{self.kv_heads}"
        length = f"L{self.seq}" if self.seq == self.seq_k else f"L{self.seq}x{self.seq_k}"
        tail = "".join(f" {flag}" for flag, on in (("causal", self.causal), ("+lse", self.lse)) if on)
        return f"attention b{self.batch} {heads} {length} d{self.head_dim} {self.dtype} {self.layout}{tail}"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    # ---- what it computes ------------------------------------------------------------------------------------------

    @property
    def scale(self) -> float:
        return 1.0 / math.sqrt(self.head_dim)

    @property
    def group(self) -> int:
        """Query heads per key/value head (1: plain multi-head attention)."""
        return self.heads // self.kv_heads

    @property
    def causal_offset(self) -> int:
        """L_k − L_q: with `causal`, query row i sees keys j <= i + causal_offset."""
        return self.seq_k - self.seq

    def visible_keys(self, row: int) -> int:
        """How many keys query row `row` sees."""
        return min(self.seq_k, row + self.causal_offset + 1) if self.causal else self.seq_k

    @property
    def score_entries(self) -> int:
        """Unmasked entries of one head's L_q × L_k score matrix."""
        if not self.causal:
            return self.seq * self.seq_k
        # row i sees i + offset + 1 keys (offset >= 0, so never more than L_k)
        return self.seq * (self.causal_offset + 1) + self.seq * (self.seq - 1) // 2

    def shape(self, tensor: str) -> tuple[int, ...]:
        """The shape of q, k, v, out or lse."""
        if tensor == "lse":
            return (self.batch, self.heads, self.seq)
        if tensor in ("q", "out"):
            return layout_shape(self.layout, self.batch, self.heads, self.seq, self.head_dim)
        if tensor in ("k", "v"):
            return layout_shape(self.layout, self.batch, self.kv_heads, self.seq_k, self.head_dim)
        raise KeyError(tensor)

    def strides(self, tensor: str) -> tuple[int, int, int]:
        """(batch, head, row) element strides of q, k, v or out, contiguous in the problem's layout (head_dim: 1)."""
        if tensor in ("q", "out"):
            return layout_strides(self.layout, self.heads, self.seq, self.head_dim)
        if tensor in ("k", "v"):
            return layout_strides(self.layout, self.kv_heads, self.seq_k, self.head_dim)
        raise KeyError(tensor)

    def tensors(self) -> tuple[Tensor, ...]:
        out = [Tensor(name, self.shape(name)) for name in ("q", "k", "v")]
        out.append(Tensor("out", self.shape("out"), output=True))
        if self.lse:
            out.append(Tensor("lse", self.shape("lse"), output=True, dtype=LSE_DTYPE))
        return tuple(out)

    @property
    def flops(self) -> int:
        """4·D per unmasked score entry (Q·Kᵀ and P·V, a multiply-add each), over B·H heads: 4·B·H·L_q·L_k·D without
        a mask; with `causal` the entries are counted exactly (about half for L_q = L_k). The softmax is left out."""
        return 4 * self.batch * self.heads * self.head_dim * self.score_entries

    @property
    def bytes(self) -> int:
        """The fewest bytes moved: q, k, v read once, out (and lse) written once."""
        elems = sum(_count(t.shape) for t in self.tensors() if t.dtype is None)
        extra = self.batch * self.heads * self.seq * get_dtype(LSE_DTYPE).storage_bytes if self.lse else 0
        return elems * get_dtype(self.dtype).storage_bytes + extra


def _count(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


_ARRAY_DTYPES = {"fp64": ("float64",), "fp32": ("float32",), "fp16": ("float16",), "bf16": ("bfloat16", "uint16")}


def check_operands(problem: AttentionProblem, operands: Mapping[str, Any], *, dtypes: bool = False) -> None:
    """Arrays given for a problem must have its tensors' shapes (and with `dtypes`, its element types: bf16 as
    bfloat16 or its uint16 bit patterns, lse float32): a UsageError naming the first that does not."""
    for t in problem.tensors():
        array = operands.get(t.name)
        if array is None:
            raise UsageError(f"attention {problem.label} needs {t.name} of shape {t.shape}, and none was given.")
        if tuple(array.shape) != t.shape:
            raise UsageError(f"{t.name} has shape {tuple(array.shape)}, but {problem.label} needs {t.shape}.",
                             f"Give {t.name} as {' x '.join(map(str, t.shape))} (layout {problem.layout}).")
        if dtypes:
            want = t.dtype or problem.dtype
            have = str(getattr(array, "dtype", "")).replace("torch.", "")
            if have not in _ARRAY_DTYPES[want]:
                raise UsageError(f"{t.name} holds {have} elements, but {problem.label} needs {want}.",
                                 f"Convert {t.name} to {_ARRAY_DTYPES[want][0]}, or tune the problem for {have}.")


def make_inputs(problem: AttentionProblem, rng) -> dict[str, Any]:
    """Fresh random inputs by tensor name, rounded to the dtype, never zeros. q and k have magnitudes in [0.5, 1] and
    random signs, so each scaled score has a standard deviation of about 0.58 whatever D is: the softmax weights
    of a row differ (typically by factors of e^±1), and a kernel that ignores the scores, the scale or the mask misses
    by far more than any bound. v is uniform in [-1, 1]. `rng` is a numpy Generator, or a CuPy RandomState for
    inputs made on the current GPU."""
    def signed(shape):
        return rng.uniform(0.5, 1.0, size=shape) * (2.0 * (rng.uniform(0.0, 1.0, size=shape) < 0.5) - 1.0)

    return {"q": representable(signed(problem.shape("q")), problem.dtype),
            "k": representable(signed(problem.shape("k")), problem.dtype),
            "v": representable(rng.uniform(-1.0, 1.0, size=problem.shape("v")), problem.dtype)}


def to_bhld(problem: AttentionProblem, array: Any, xp: Any) -> Any:
    """A float64 (B, heads, L, D) view of q, k, v or out given in the problem's layout."""
    a = xp.asarray(array, dtype=xp.float64)
    return a if problem.layout == "bhld" else a.transpose(0, 2, 1, 3)


def reference(problem: AttentionProblem, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """out (and lse) in float64 on the inputs' device, from the exact softmax: no rounding of the weights P (the
    exact math a kernel that rounds P to 16 bits before P·V is judged against).

    Chunked so that no L_q × L_k matrix exists at once: blocks of (batch, key/value head) pairs × query rows whose
    scores (all `group` query heads that share the key/value head, every key) stay under REFERENCE_CHUNK_BYTES — at
    the least one pair and one row, L_k·group·8 bytes. Each row's keys are taken whole, so the softmax is the plain
    one (max, exp, sum), in float64 matmuls (numpy's BLAS on the host, cuBLAS DGEMM for CuPy inputs)."""
    xp = array_module(inputs["q"])
    p = problem
    b, hkv, g, lq, lk, d = p.batch, p.kv_heads, p.group, p.seq, p.seq_k, p.head_dim
    # (B·H_kv, group, L, D): query heads h = kv·group + j share key/value head kv
    q = to_bhld(p, inputs["q"], xp).reshape(b * hkv, g, lq, d)
    k = to_bhld(p, inputs["k"], xp).reshape(b * hkv, 1, lk, d)
    v = to_bhld(p, inputs["v"], xp).reshape(b * hkv, 1, lk, d)
    out = xp.empty((b * hkv, g, lq, d), dtype=xp.float64)
    lse = xp.empty((b * hkv, g, lq), dtype=xp.float64)
    row_bytes = g * lk * 8
    rows = max(1, min(lq, REFERENCE_CHUNK_BYTES // row_bytes))
    pairs = max(1, min(b * hkv, REFERENCE_CHUNK_BYTES // (row_bytes * rows)))
    kt = k.swapaxes(-1, -2)
    cols = xp.arange(lk)
    for p0 in range(0, b * hkv, pairs):
        p1 = min(b * hkv, p0 + pairs)
        for r0 in range(0, lq, rows):
            r1 = min(lq, r0 + rows)
            s = xp.matmul(q[p0:p1, :, r0:r1], kt[p0:p1]) * p.scale  # (pairs, group, rows, L_k)
            if p.causal:
                last = xp.arange(r0, r1) + p.causal_offset  # the last key each row sees
                s = xp.where(cols[None, :] > last[:, None], -xp.inf, s)
            m = s.max(axis=-1, keepdims=True)
            e = xp.exp(s - m)
            total = e.sum(axis=-1, keepdims=True)
            out[p0:p1, :, r0:r1] = xp.matmul(e, v[p0:p1]) / total
            lse[p0:p1, :, r0:r1] = (m + xp.log(total))[..., 0]
    out = out.reshape(b, p.heads, lq, d)
    result = {"out": out if p.layout == "bhld" else xp.ascontiguousarray(out.transpose(0, 2, 1, 3))}
    if p.lse:
        result["lse"] = lse.reshape(b, p.heads, lq)
    return result
