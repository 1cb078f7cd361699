"""On a Hopper GPU: the FA3-style attention family (fa3) against the float64 reference through the one check path
(backends/checked.py: fresh inputs, NaN-poisoned outputs): every hand-picked configuration (the ping-pong ones among
them, on every shape with two consumer warpgroups' worth of query rows) and two samples of the space per shape, over
head dims 64 and 128, causal and not, grouped-query heads, ragged L_q / L_k (1000, 4097, L_q > L_k, L_q < L_k), lse on
and off, fp16 and bf16. Marked `gpu`; skipped without CuPy, cuda.bindings or an sm_90 GPU.

The smoke test runs first on the simplest configuration: a broken pipeline traps (WG_HANG_CYCLES, ~2 s) and leaves
the CUDA context unusable, so every later test then fails too; read the first failure. Each failure names the
configuration (fa3 block_m x block_n, stages, consumers) and the check's status and reason. About a minute on an H200
(before the ping-pong picks; about 90 configurations now, a minute or two).

Ping-pong (pingpong = 1) orders the two consumer warpgroups by named barriers, whose waits cannot time out: a
broken turn order could hang the GPU instead of trapping. The ping-pong smoke test runs second, and every test has a
timeout (pytest-timeout, thread method: it ends the process even while a CUDA call blocks), so a deadlock ends the
run with the stack of the hung test instead of hanging it.

On an H200: timeout 900 pytest tests/engine_hopper/test_attention_wgmma_gpu.py -q
"""

from __future__ import annotations

import time

import pytest

from tracea_cli.backends import cuda
from tracea_cli.backends.op_backend import OpBackend
from tracea_cli.ops.attention.families import wgmma_space as ws
from tracea_cli.ops.registry import get_op

TIMEOUT_S = 300  # per test: ten times what the slowest shape takes on an H200
pytestmark = [pytest.mark.gpu, pytest.mark.timeout(TIMEOUT_S, method="thread")]

OP = get_op("attention")
BACKEND = OpBackend("attention", "cuda")
SAMPLES = 2  # configurations of the space beyond the hand-picked ones, per shape


@pytest.fixture(scope="module")
def h200():
    reason = cuda.gpu_ready(0)
    if reason:
        pytest.skip(reason)
    import cupy

    cc = str(cupy.cuda.Device(0).compute_capability)  # "90" on Hopper
    if cc != "90":
        pytest.skip(f"this GPU is compute capability {cc[:-1]}.{cc[-1]}; the fa3 family runs on 9.0 (Hopper) only")
    return cuda.device_target(0)


def _check(p, configs, target) -> list[str]:
    """One line per configuration that is not correct (or that raised), with what the check said."""
    failures = []
    for seed, config in enumerate(configs):
        began = time.perf_counter()
        try:
            ev = BACKEND.check(BACKEND.compile(p, config, target), p, target, seed=seed)
        except Exception as e:  # a compile or launch failure outside the typed outcomes: say which config
            failures.append(f"{ws.describe(config)} {config}: raised {type(e).__name__}: {e}")
            continue
        if not ev.ok:
            failures.append(f"{ws.describe(config)} {config}: {ev.status.value}: {ev.reason} "
                            f"({time.perf_counter() - began:.1f} s)")
    return failures


def test_smoke_one_consumer_one_block_shape(h200):
    p = OP.problem(batch=1, heads=2, seq=128, head_dim=64, dtype="fp16")
    failures = _check(p, [{"family": "fa3", "block_n": 64, "stages": 2, "consumers": 1}], h200)
    assert not failures, failures


def test_smoke_pingpong_two_consumers_both_schedules(h200):
    """The two consumer warpgroups taking turns, without and with the intra-warpgroup overlap: one key block (two
    turns each), causal with 2 and 4 key blocks in the two query blocks, and 5 key blocks through a 2-slot ring (a turn
    order that deadlocks hangs here first: the timeout ends it)."""
    for seq, seq_k, causal in ((128, 64, False), (256, 256, True), (320, 320, False)):
        p = OP.problem(batch=1, heads=2, seq=seq, seq_k=seq_k, head_dim=64, dtype="fp16", causal=causal)
        configs = [{"family": "fa3", "block_n": 64, "stages": 2, "consumers": 2, "overlap": o, "pingpong": 1}
                   for o in (0, 1)]
        failures = _check(p, configs, h200)
        assert not failures, (p.label, failures)


SHAPES = [  # problem fields beyond batch 2, heads 4
    dict(seq=1000, head_dim=128, dtype="bf16", causal=True, lse=True),
    dict(seq=4097, head_dim=128, dtype="bf16"),
    dict(seq=1000, seq_k=4097, head_dim=64, dtype="fp16", causal=True, lse=True),
    dict(seq=4097, seq_k=1000, head_dim=64, dtype="bf16", lse=True),
    dict(seq=1000, head_dim=128, heads=8, kv_heads=2, dtype="fp16", causal=True),
    dict(seq=64, seq_k=200, head_dim=64, heads=8, kv_heads=1, dtype="bf16", lse=True),
    dict(seq=130, head_dim=64, dtype="fp16", causal=True),
    dict(seq=2048, head_dim=128, dtype="fp16", lse=True),
    dict(seq=777, seq_k=2000, head_dim=128, heads=8, kv_heads=4, dtype="bf16", causal=True, lse=True),
]


def _label(fields):
    return "-".join(f"{k}{v}" for k, v in fields.items())


def configs_for(p, target) -> list[dict]:
    """The hand-picked configurations, then SAMPLES others of the space spread over its valid list."""
    picks = ws.hand_picked(p, target)
    rest = [c for c in ws.fa3_space(p, target).valid_configs() if c not in picks]
    return picks + rest[:: max(1, len(rest) // SAMPLES)][:SAMPLES]


@pytest.mark.parametrize("fields", SHAPES, ids=[_label(f) for f in SHAPES])
def test_every_hand_pick_and_samples_match_the_reference(fields, h200):
    p = OP.problem(**{"batch": 2, "heads": 4, **fields})
    configs = configs_for(p, h200)
    assert configs, p.label
    failures = _check(p, configs, h200)
    assert not failures, f"{p.label}: {len(failures)} of {len(configs)} configurations failed:\n" + "\n".join(failures)
