"""The CPU runtime's vector vocabulary (backends/numba_simd.py): SiLU on vectors (its polynomial exp) against numpy
in float64, NaN kept, the clamped range's ends, and the cache hint changing nothing."""

from __future__ import annotations

import numpy as np
import pytest

numba = pytest.importorskip("numba")

from tracea_cli.backends.numba_simd import vload, vprefetch, vsilu, vstore  # noqa: E402

LANES = {np.float32: 16, np.float64: 8}


def _mapped(fn, lanes):
    @numba.njit
    def run(x, out):
        for i in range(0, x.size, lanes):
            vprefetch(x, i + 64, 2)  # a hint past the end of the array: it must not fault or change a result
            vstore(out, i, fn(vload(x, i, lanes)))

    return run


@pytest.mark.parametrize("dtype, low, ulps", [(np.float32, -87.3, 4), (np.float64, -708.0, 4)])
def test_vsilu_is_within_a_few_ulp_where_it_is_mostly_its_exp(dtype, low, ulps):
    """For x well below 0, SiLU(x) = x / (1 + e^-x) is about x·e^x: its error is the exp polynomial's."""
    x = np.random.default_rng(0).uniform(low, -1.0, 4096).astype(dtype)
    out = np.empty_like(x)
    _mapped(vsilu, LANES[dtype])(x, out)
    wide = x.astype(np.float64)
    ref = wide / (1.0 + np.exp(-wide))
    assert np.all(np.abs(out / ref - 1) <= ulps * np.finfo(dtype).eps), np.max(np.abs(out / ref - 1))


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
