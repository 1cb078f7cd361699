"""The correctness policy: relative Frobenius error against a float64 reference, a bound per dtype, NaN never passes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tracea_cli.ops.dtypes import get_dtype


@dataclass(frozen=True)
class Verdict:
    ok: bool
    rel_error: float
    bound: float
    reason: str  # empty when ok

    def as_dict(self) -> dict:
        return {"ok": self.ok, "rel_error": self.rel_error, "bound": self.bound, "reason": self.reason}


def relative_error(out: np.ndarray, ref: np.ndarray) -> float:
    out64 = np.asarray(out, dtype=np.float64)
    ref64 = np.asarray(ref, dtype=np.float64)
    denom = float(np.linalg.norm(ref64))
    num = float(np.linalg.norm(out64 - ref64))
    return num / denom if denom > 0 else num


def check(out: np.ndarray, ref: np.ndarray, dtype: str) -> Verdict:
    """Judge a kernel's output (already converted to float64 values) against the reference."""
    bound = get_dtype(dtype).bound
    if out.shape != ref.shape:
        return Verdict(False, float("inf"), bound, f"output shape {out.shape} differs from the reference's {ref.shape}")
    nonfinite = int(np.count_nonzero(~np.isfinite(out)))
    if nonfinite:
        return Verdict(False, float("nan"), bound, f"{nonfinite} of {out.size} outputs are NaN or infinite (unwritten or overflowed)")
    err = relative_error(out, ref)
    if not err <= bound:
        return Verdict(False, err, bound, f"relative error {err:.3g} exceeds the {dtype} bound {bound:g}")
    return Verdict(True, err, bound, "")
