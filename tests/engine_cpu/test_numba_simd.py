"""The CPU runtime's vector vocabulary (backends/numba_simd.py): exp and SiLU on vectors against numpy in float64,
NaN kept, the clamped range's ends, and the cache hint changing nothing."""

from __future__ import annotations

import numpy as np
import pytest

numba = pytest.importorskip("numba")

from tracea_cli.backends.numba_simd import vexp, vload, vprefetch, vsilu, vstore  # noqa: E402

LANES = {np.float32: 16, np.float64: 8}


def _mapped(fn, lanes):
    @numba.njit
    def run(x, out):
        for i in range(0, x.size, lanes):
            vprefetch(x, i + 64, 2)  # a hint past the end of the array: it must not fault or change a result
            vstore(out, i, fn(vload(x, i, lanes)))

    return run


@pytest.mark.parametrize("dtype, low, high, ulps", [(np.float32, -87.3, 88.3, 2), (np.float64, -708.0, 709.0, 4)])
def test_vexp_is_within_a_few_ulp_over_the_range(dtype, low, high, ulps):
    x = np.random.default_rng(0).uniform(low, high, 4096).astype(dtype)
    x[:4] = [0.0, -0.0, 1.0, -1.0]
    out = np.empty_like(x)
    _mapped(vexp, LANES[dtype])(x, out)
    ref = np.exp(x.astype(np.float64) if dtype == np.float32 else x)
    assert np.all(np.abs(out / ref - 1) <= ulps * np.finfo(dtype).eps), np.max(np.abs(out / ref - 1))
    assert out[0] == out[1] == 1.0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_vsilu_matches_the_definition_keeps_nan_and_clamps_far_out(dtype):
    lanes = LANES[dtype]
    x = np.random.default_rng(1).uniform(-30.0, 30.0, 64 * lanes).astype(dtype)
    x[:6] = [np.nan, 0.0, 200.0, -200.0, np.inf, 1.0]
    out = np.empty_like(x)
    _mapped(vsilu, lanes)(x, out)
    wide = x.astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        ref = wide / (1.0 + np.exp(-wide))
    assert np.isnan(out[0]) and out[1] == 0.0 and out[2] == 200.0
    assert abs(out[3]) < 1e-30  # exp(200) is clamped to the largest exp of the range, not inf: SiLU is near 0
    assert out[4] == np.inf
    finite = slice(5, None)
    assert np.allclose(out[finite], ref[finite], rtol=4 * np.finfo(dtype).eps, atol=0)
