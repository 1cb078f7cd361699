"""Hand-picked configurations for a few rows of C: memory-bound, so they split K to fill the SMs."""

from __future__ import annotations

import pytest

from tracea_cli.ops.gemm.cuda_space import SMALL_M_WAVES, gemm_space, hand_picked
from tracea_cli.ops.gemm.problem import GemmProblem


@pytest.mark.parametrize("dtype,layout", [("fp16", "nn"), ("bf16", "nt"), ("fp32", "nn")])
def test_small_m_first_pick_splits_k_over_several_waves(sm90, dtype, layout):
    problem = GemmProblem(16, 4096, 4096, dtype, layout)
    first = hand_picked(problem, sm90, limit=3)[0]
    assert gemm_space(problem, sm90).why_invalid(first) is None
    blocks = -(-problem.n // first["block_n"]) * first["split_k"]
    assert first["block_m"] == 32 and blocks >= SMALL_M_WAVES * sm90.limits.sm_count


def test_large_problems_keep_their_picks(sm90):
    picks = hand_picked(GemmProblem(4096, 4096, 4096, "fp16"), sm90, limit=3)
    assert all(c["split_k"] == 1 and c["block_m"] >= 128 for c in picks)
