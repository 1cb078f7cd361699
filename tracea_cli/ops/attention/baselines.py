"""The libraries attention is measured against: torch's scaled_dot_product_attention (SDPA), as chosen by torch and
pinned to each of its backends, and numpy on the host.

    sdpa            F.scaled_dot_product_attention as a user calls it; torch picks the backend (CUDA, CPU)
    sdpa-cudnn      the same inside torch.nn.attention.sdpa_kernel(SDPBackend.CUDNN_ATTENTION) (CUDA)
    sdpa-flash      ... FLASH_ATTENTION (CUDA; on the CPU torch's own flash-style CPU kernel)
    sdpa-efficient  ... EFFICIENT_ATTENTION (CUDA: the memory-efficient, xformers-style kernel)
    sdpa-math       ... MATH (CUDA, CPU: the unfused matmul/softmax/matmul composite)
    numpy           the softmax of q·kᵀ in blocks of query rows, with numpy's BLAS (CPU; where torch is missing)

Which backend ran: each label names it ("torch-sdpa (default ran flash)", "torch-sdpa-cudnn (ran cudnn)"), read from
the ATen operators of one untimed call under torch.profiler (CPU activity: the dispatcher's own operators, such as
aten::_scaled_dot_product_cudnn_attention, aten::_scaled_dot_product_flash_attention(_for_cpu),
aten::_efficient_attention_forward or aten::_scaled_dot_product_attention_math): the one that actually ran, not a
guess from flags, which also shows when a pinned backend was not the one that ran. The profiler's native log lines
on stderr are silenced for that one call.

How the problem is given to torch: layout blhd as transposed views (B, H, L, D) of the same memory, no copy; grouped-
query attention with enable_gqa=True (torch >= 2.5), else K and V repeated per query head once, outside the timed
call (the label says "kv repeated"); the causal mask as is_causal=True where L_q = L_k, else
torch.nn.attention.bias.causal_lower_right(L_q, L_k) (else an explicit boolean mask, tril(L_k − L_q)): the same
bottom-right alignment as the op. scale = 1/sqrt(D) is passed explicitly.

SDPA returns a new tensor: the first (checked) call copies it into the problem's out; the timed calls do not copy
(the library's call is what is timed, its output allocation from torch's caching allocator included). SDPA returns
no log-sum-exp: on an lse problem the torch baselines add what a torch user writes for it, torch.logsumexp over fp32
scores in blocks of query rows, timed with the call (the label says "lse by logsumexp"); numpy's computes it from
the sums it already has. The shared check-then-time path (backends/checked.py) checks each
baseline against the float64 reference exactly as a tuned kernel. Libraries are imported when a baseline is prepared,
never at import; a missing one raises ToolchainMissing.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Callable, Iterator, Mapping

import numpy as np

from tracea_cli.ops.attention.problem import AttentionProblem
from tracea_cli.ops.base import Baseline, BaselineRun
from tracea_cli.ops.torch_tensors import as_torch, require_torch

#: baseline name -> (SDPBackend member, the word the profile shows); None: torch's own choice
SDPA_BACKENDS: dict[str, str | None] = {"sdpa": None, "sdpa-cudnn": "CUDNN_ATTENTION", "sdpa-flash": "FLASH_ATTENTION",
                                        "sdpa-efficient": "EFFICIENT_ATTENTION", "sdpa-math": "MATH"}
# (the backend's word, marks in an ATen operator's name), checked in this order
_PROFILE_MARKS = (("cudnn", ("cudnn",)), ("flash", ("flash",)), ("efficient", ("efficient", "mem_eff")),
                  ("math", ("_scaled_dot_product_attention_math", "attention_math")))
NUMPY_CHUNK_BYTES = 32 << 20  # numpy's block of scores


def backend_in_profile(names: Any) -> str | None:
    """The SDPA backend the ATen operator names of one call show (None: no SDPA operator among them)."""
    names = [str(n).lower() for n in names]
    for word, marks in _PROFILE_MARKS:
        if any(m in n for n in names for m in marks):
            return word
    return None


@contextlib.contextmanager
def _quiet_native_stderr() -> Iterator[None]:
    """The process's file descriptor 2 sent to /dev/null (torch's profiler logs there from C++)."""
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def which_backend_ran(torch: Any, call: Callable[[], Any], on_gpu: bool) -> str:
    """Run `call` once under torch.profiler and name the SDPA backend whose operator ran."""
    from torch.profiler import ProfilerActivity, profile

    with _quiet_native_stderr(), profile(activities=[ProfilerActivity.CPU]) as prof:
        call()
        if on_gpu:
            torch.cuda.synchronize()
    found = backend_in_profile(e.key for e in prof.key_averages())
    return found or "unknown"


def _gqa_keyword(torch: Any) -> bool:
    """Whether this torch's SDPA takes enable_gqa (2.5 and later)."""
    return "enable_gqa" in (torch.nn.functional.scaled_dot_product_attention.__doc__ or "")


def _causal_lower_right(torch: Any, p: AttentionProblem, device: Any) -> tuple[Any, str]:
    """SDPA's attn_mask for the op's bottom-right causal rule, and how it is made."""
    try:
        from torch.nn.attention.bias import causal_lower_right
    except ImportError:
        ones = torch.ones(p.seq, p.seq_k, dtype=torch.bool, device=device)
        return ones.tril(diagonal=p.causal_offset), "explicit mask"
    return causal_lower_right(p.seq, p.seq_k), "causal_lower_right"


def _logsumexp_pass(torch: Any, p: AttentionProblem, q: Any, k: Any, lse_array: Any) -> Callable[[], None]:
    """The log-sum-exp SDPA does not return, as a torch user gets it: torch.logsumexp over fp32 scores q·kᵀ·scale
    (masked), in blocks of query rows. q and k are converted to fp32 (and k repeated per query head) once, here."""
    lse = as_torch(torch, lse_array, "fp32")
    q32 = q.float()
    k32 = k.float().repeat_interleave(p.group, dim=1) if k.shape[1] != q.shape[1] else k.float()
    kt = k32.transpose(-1, -2)
    rows = max(1, min(p.seq, NUMPY_CHUNK_BYTES * 8 // (p.batch * p.heads * p.seq_k * 4)))
    masks = []
    for r0 in range(0, p.seq, rows):
        r1 = min(p.seq, r0 + rows)
        if p.causal:
            i = torch.arange(r0, r1, device=q.device)[:, None] + p.causal_offset
            masks.append((r0, r1, torch.arange(p.seq_k, device=q.device)[None, :] > i))
        else:
            masks.append((r0, r1, None))

    def run() -> None:
        for r0, r1, masked in masks:
            s = torch.matmul(q32[:, :, r0:r1], kt).mul_(p.scale)
            if masked is not None:
                s.masked_fill_(masked, float("-inf"))
            lse[:, :, r0:r1] = torch.logsumexp(s, dim=-1)

    return run


def prepare_sdpa(name: str) -> Callable[[AttentionProblem, Mapping[str, Any]], BaselineRun]:
    def prepare(problem: AttentionProblem, ops: Mapping[str, Any]) -> BaselineRun:
        torch = require_torch("Install PyTorch (pip install torch) for the SDPA baselines, or use --baseline numpy "
                              "on the cpu backend.")
        p = problem
        from torch.nn.attention import SDPBackend, sdpa_kernel

        q, k, v, out = (as_torch(torch, ops[t], p.dtype) for t in ("q", "k", "v", "out"))
        if p.layout == "blhd":  # (B, L, H, D) memory as (B, H, L, D) views
            q, k, v, out = (t.transpose(1, 2) for t in (q, k, v, out))
        notes = []
        keywords: dict[str, Any] = {"scale": p.scale}
        if p.group > 1:
            if _gqa_keyword(torch):
                keywords["enable_gqa"] = True
            else:
                k, v = (t.repeat_interleave(p.group, dim=1) for t in (k, v))
                notes.append("kv repeated")
        if p.causal and p.seq == p.seq_k:
            keywords["is_causal"] = True
        elif p.causal:
            keywords["attn_mask"], how = _causal_lower_right(torch, p, q.device)
            if how != "causal_lower_right":
                notes.append(how)
        sdpa = torch.nn.functional.scaled_dot_product_attention
        pinned = SDPA_BACKENDS[name]

        def context() -> Any:
            return sdpa_kernel([getattr(SDPBackend, pinned)]) if pinned else contextlib.nullcontext()

        def call() -> Any:
            return sdpa(q, k, v, **keywords)

        on_gpu = q.device.type != "cpu"
        with torch.inference_mode(), context():
            ran = which_backend_ran(torch, call, on_gpu)
        lse_pass = _logsumexp_pass(torch, p, q, k, ops["lse"]) if p.lse else None
        if lse_pass is not None:
            notes.append("lse by logsumexp")
        checked = [False]

        def run() -> None:
            with torch.inference_mode():
                result = call()
                if lse_pass is not None:
                    lse_pass()
                if not checked[0]:  # the first call is the checked one; timed calls time the library call alone
                    out.copy_(result)
                    checked[0] = True

        label = "torch-sdpa" + (f"-{name.removeprefix('sdpa-')} (ran {ran}" if pinned else f" (default ran {ran}")
        label += "".join(f"; {n}" for n in notes) + ")"
        stream = None if not on_gpu else int(torch.cuda.current_stream(q.device).cuda_stream)
        return BaselineRun(label, run, context, stream)

    return prepare


def reference_blocks(p: AttentionProblem, q: Any, k: Any, v: Any, out: Any, lse: Any, xp: Any = np,
                     budget: int = NUMPY_CHUNK_BYTES) -> None:
    """out (and lse, unless None) from (B, H, L, D) views of q, k, v, out in their own dtype: per batch and key/value
    head, blocks of query rows of all `group` heads that share it, each row's scores whole (max, exp, sum)."""
    rows = max(1, min(p.seq, budget // (p.group * p.seq_k * q.itemsize)))
    cols = xp.arange(p.seq_k)
    for b in range(p.batch):
        for g in range(p.kv_heads):
            heads = slice(g * p.group, (g + 1) * p.group)
            kt, vg = k[b, g].T, v[b, g]
            for r0 in range(0, p.seq, rows):
                r1 = min(p.seq, r0 + rows)
                s = xp.matmul(q[b, heads, r0:r1], kt)
                s *= q.dtype.type(p.scale)
                if p.causal:
                    s[:, cols[None, :] > xp.arange(r0, r1)[:, None] + p.causal_offset] = -xp.inf
                m = s.max(axis=-1, keepdims=True)
                s -= m
                xp.exp(s, out=s)
                total = s.sum(axis=-1, keepdims=True)
                out[b, heads, r0:r1] = xp.matmul(s, vg) / total
                if lse is not None:
                    lse[b, heads, r0:r1] = (m + xp.log(total))[..., 0]


def prepare_numpy(problem: AttentionProblem, ops: Mapping[str, Any]) -> BaselineRun:
    """The softmax of q·kᵀ·scale in blocks of query rows (numpy's BLAS for both products, with its own threads), in
    the problem's dtype: what a user without torch writes."""
    p = problem
    q, k, v, out = (ops[t] for t in ("q", "k", "v", "out"))
    if p.layout == "blhd":
        q, k, v, out = (a.transpose(0, 2, 1, 3) for a in (q, k, v, out))
    lse = ops["lse"] if p.lse else None

    def run() -> None:
        reference_blocks(p, q, k, v, out, lse)

    return BaselineRun("numpy-blocked", run)


_SDPA_ON = {"sdpa": ("cuda", "cpu"), "sdpa-cudnn": ("cuda",), "sdpa-flash": ("cuda", "cpu"),
            "sdpa-efficient": ("cuda",), "sdpa-math": ("cuda", "cpu")}

BASELINES = (
    *(Baseline(name, _SDPA_ON[name], prepare_sdpa(name), default=name == "sdpa", requires="torch")
      for name in SDPA_BACKENDS),
    Baseline("numpy", ("cpu",), prepare_numpy, default=True),
)
