"""The correctness policy: relative Frobenius error against a float64 reference, a bound per dtype, NaN never passes."""

from __future__ import annotations

from dataclasses import dataclass

from tracea_cli.ops.dtypes import array_module, get_dtype


@dataclass(frozen=True)
class Verdict:
    ok: bool
    rel_error: float
    bound: float
    reason: str  # empty when ok

    def as_dict(self) -> dict:
        return {"ok": self.ok, "rel_error": self.rel_error, "bound": self.bound, "reason": self.reason}


def relative_error(out, ref) -> float:
    xp = array_module(ref)
    out64 = xp.asarray(out, dtype=xp.float64)
    ref64 = xp.asarray(ref, dtype=xp.float64)
    denom = float(xp.linalg.norm(ref64))
    num = float(xp.linalg.norm(out64 - ref64))
    return num / denom if denom > 0 else num


def check(out, ref, dtype: str) -> Verdict:
    """Judge a kernel's output (already converted to float64 values) against the reference. Both may live on the
    host (numpy) or both on one GPU (CuPy): a large check on the GPU costs milliseconds instead of seconds."""
    xp = array_module(ref)
    bound = get_dtype(dtype).bound
    if out.shape != ref.shape:
        return Verdict(False, float("inf"), bound, f"output shape {out.shape} differs from the reference's {ref.shape}")
    nonfinite = int(xp.count_nonzero(~xp.isfinite(out)))
    if nonfinite:
        return Verdict(False, float("nan"), bound, f"{nonfinite} of {out.size} outputs are NaN or infinite (unwritten or overflowed)")
    err = relative_error(out, ref)
    if not err <= bound:
        return Verdict(False, err, bound, f"relative error {err:.3g} exceeds the {dtype} bound {bound:g}")
    return Verdict(True, err, bound, "")
