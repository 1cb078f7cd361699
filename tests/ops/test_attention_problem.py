"""The attention problem: options and defaults, validation sentences, its cache identity, tensors and strides in both
layouts, inputs, exact work counts (causal, cross attention), the float64 reference against a direct per-row formula
(L ∈ {1, 17}, GQA, both layouts, lse, the chunked path), the operands check and the suites."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tracea_cli.errors import UsageError
from tracea_cli.ops.attention import problem as ap
from tracea_cli.ops.attention.problem import AttentionProblem, check_operands, make_inputs, reference
from tracea_cli.ops.registry import get_op

OP = get_op("attention")


def naive(p: AttentionProblem, inputs) -> tuple[np.ndarray, np.ndarray]:
    """out and lse row by row, straight from the definition (no shared code with the reference)."""
    def head(name, b, h, i):
        a = inputs[name]
        return a[b, h, i] if p.layout == "bhld" else a[b, i, h]

    out = np.zeros(p.shape("out"))
    lse = np.zeros((p.batch, p.heads, p.seq))
    for b in range(p.batch):
        for h in range(p.heads):
            g = h // (p.heads // p.kv_heads)
            for i in range(p.seq):
                keys = range(p.seq_k) if not p.causal else range(min(p.seq_k, i + p.seq_k - p.seq + 1))
                s = np.array([float(np.dot(head("q", b, h, i), head("k", b, g, j))) / math.sqrt(p.head_dim)
                              for j in keys])
                w = np.exp(s - s.max())
                row = sum(wj * head("v", b, g, j) for wj, j in zip(w, keys)) / w.sum()
                if p.layout == "bhld":
                    out[b, h, i] = row
                else:
                    out[b, i, h] = row
                lse[b, h, i] = math.log(sum(math.exp(x) for x in s))
    return out, lse


def test_options_default_kv_heads_and_seq_k_and_the_rest():
    p = OP.problem(heads=16, seq=4096, head_dim=128, causal=True)
    assert (p.batch, p.kv_heads, p.seq_k, p.dtype, p.layout, p.lse, p.group) == (1, 16, 4096, "bf16", "bhld", False, 1)
    assert p.label == "attention b1 h16 L4096 d128 bf16 bhld causal" and p.scale == 1 / math.sqrt(128)
    q = OP.problem(batch=2, heads=32, kv_heads=8, seq=1, seq_k=8192, head_dim=64, dtype="fp16", layout="blhd",
                   lse=True)
    assert q.group == 4 and q.label == "attention b2 h32/kv8 L1x8192 d64 fp16 blhd +lse"


@pytest.mark.parametrize("bad, says", [
    (dict(head_dim=96), "head_dim must be one of 64, 128, 256, got 96"),
    (dict(head_dim=True), "head_dim must be one of 64, 128, 256"),
    (dict(kv_heads=3), "kv_heads 3 does not divide heads 8"),
    (dict(kv_heads=16), "kv_heads 16 does not divide heads 8"),
    (dict(causal=True, seq=300, seq_k=200), "causal attention with seq 300 > seq_k 200 would leave the first 100 "
                                            "query rows with no key"),
    (dict(batch=0), "batch must be a positive whole number, got 0"),
    (dict(heads=-1), "heads must be a positive whole number"),
    (dict(seq=0), "seq must be a positive whole number"),
    (dict(seq_k=2.5), "seq_k must be a positive whole number"),
    (dict(seq=1 << 21), "seq 2097152 is larger than"),
    (dict(dtype="tf32"), "unknown dtype 'tf32'"),
    (dict(layout="bdhl"), "unknown layout 'bdhl'"),
    (dict(causal="yes"), "causal must be true or false"),
    (dict(lse=1), "lse must be true or false"),
])
def test_bad_problems_are_one_sentence_naming_the_option(bad, says):
    with pytest.raises(UsageError) as e:
        AttentionProblem(**{"batch": 2, "heads": 8, "seq": 64, "head_dim": 64, "kv_heads": 8, "seq_k": 64, **bad})
    assert says in e.value.message, e.value.message
    assert e.value.message.endswith(".") and e.value.message.count(". ") == 0
    assert e.value.hint is None or e.value.hint.endswith(".")


def test_key_round_trips_and_a_foreign_key_is_refused():
    p = OP.problem(batch=2, heads=8, kv_heads=2, seq=100, seq_k=300, head_dim=256, dtype="fp16", causal=True,
                   layout="blhd", lse=True)
    assert OP.from_key("fp16", p.key()) == p
    assert list(p.sizes()) == ["batch", "heads", "seq", "head_dim", "kv_heads", "seq_k"]
    with pytest.raises(UsageError, match="an attention problem has"):
        OP.from_key("fp16", {"m": 3})
    with pytest.raises(UsageError, match="fuses no epilogue"):
        OP.problem(heads=2, seq=8, head_dim=64, epilogue="bias")
    assert OP.problem(heads=2, seq=8, head_dim=64, epilogue="none") == OP.problem(heads=2, seq=8, head_dim=64)


def test_tensors_and_strides_in_both_layouts():
    p = AttentionProblem(2, 8, 5, 64, 2, 7, "bf16", lse=True)
    shapes = {t.name: (t.shape, t.output, t.dtype) for t in p.tensors()}
    assert shapes == {"q": ((2, 8, 5, 64), False, None), "k": ((2, 2, 7, 64), False, None),
                      "v": ((2, 2, 7, 64), False, None), "out": ((2, 8, 5, 64), True, None),
                      "lse": ((2, 8, 5), True, "fp32")}
    assert p.strides("q") == (8 * 5 * 64, 5 * 64, 64) and p.strides("k") == (2 * 7 * 64, 7 * 64, 64)
    t = AttentionProblem(2, 8, 5, 64, 2, 7, "bf16", layout="blhd")
    assert t.shape("q") == (2, 5, 8, 64) and t.shape("v") == (2, 7, 2, 64)
    assert "lse" not in {x.name for x in t.tensors()}
    assert t.strides("out") == (5 * 8 * 64, 64, 8 * 64) and t.strides("k") == (7 * 2 * 64, 64, 2 * 64)
    for prob in (p, t):  # the strides are a C-contiguous array's, in elements
        for name in ("q", "k", "out"):
            a = np.empty(prob.shape(name), np.float32)
            b, h, r = prob.strides(name)
            axes = (0, 1, 2) if prob.layout == "bhld" else (0, 2, 1)
            assert tuple(a.strides[i] // 4 for i in axes) == (b, h, r) and a.strides[3] == 4


def brute_entries(p: AttentionProblem) -> int:
    return sum(1 for i in range(p.seq) for j in range(p.seq_k) if not p.causal or j <= i + p.seq_k - p.seq)


@pytest.mark.parametrize("seq, seq_k, causal", [(64, 64, False), (64, 64, True), (17, 17, True), (1, 1, True),
                                                (1, 100, True), (30, 100, True), (100, 30, False), (5, 7, True)])
def test_flops_count_every_unmasked_score_exactly(seq, seq_k, causal):
    p = AttentionProblem(3, 4, seq, 64, 2, seq_k, "bf16", causal=causal)
    assert p.score_entries == brute_entries(p)
    assert p.flops == 4 * 3 * 4 * 64 * brute_entries(p)
    if causal and seq == seq_k:
        assert p.score_entries == seq * (seq + 1) // 2  # about half
    assert [p.visible_keys(i) for i in range(seq)] == \
        [sum(1 for j in range(seq_k) if not causal or j <= i + seq_k - seq) for i in range(seq)]


def test_bytes_read_q_k_v_and_write_out_and_lse_once():
    p = AttentionProblem(2, 8, 100, 128, 2, 300, "bf16", lse=True)
    assert p.bytes == 2 * (2 * 8 * 100 * 128 * 2 + 2 * 2 * 2 * 300 * 128) + 4 * 2 * 8 * 100
    assert AttentionProblem(2, 8, 100, 128, 2, 300, "fp32").bytes == 4 * (2 * 2 * 8 * 100 * 128 + 2 * 2 * 2 * 300 * 128)


def test_inputs_are_representable_and_make_the_softmax_uneven():
    p = AttentionProblem(1, 2, 64, 64, 2, 64, "bf16")
    x = make_inputs(p, np.random.default_rng(0))
    assert set(x) == {"q", "k", "v"} and all(a.dtype == np.float64 for a in x.values())
    from tracea_cli.ops.dtypes import representable
    assert all(np.array_equal(a, representable(a, "bf16")) for a in x.values())
    assert 0.5 <= np.abs(x["q"]).min() and np.abs(x["k"]).max() <= 1 and np.abs(x["v"]).max() <= 1
    s = np.einsum("hid,hjd->hij", x["q"][0], x["k"][0]) * p.scale
    assert 0.4 < s.std() < 0.8  # the weights of a row differ: a kernel ignoring the scores fails the check


CASES = [
    dict(batch=1, heads=1, seq=1, seq_k=1, kv_heads=1),
    dict(batch=2, heads=4, seq=17, seq_k=17, kv_heads=2, causal=True, lse=True),
    dict(batch=1, heads=4, seq=17, seq_k=17, kv_heads=1, layout="blhd", lse=True),
    dict(batch=2, heads=2, seq=5, seq_k=23, kv_heads=2, causal=True, layout="blhd", lse=True),
    dict(batch=1, heads=2, seq=1, seq_k=17, kv_heads=1, causal=True, lse=True),
    dict(batch=1, heads=2, seq=23, seq_k=5, kv_heads=2, lse=True),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: AttentionProblem(head_dim=64, dtype="fp64", **c).label)
def test_reference_matches_the_definition(case):
    p = AttentionProblem(head_dim=64, dtype="fp64", **case)
    x = make_inputs(p, np.random.default_rng(1))
    got = reference(p, x)
    out, lse = naive(p, x)
    assert set(got) == ({"out", "lse"} if p.lse else {"out"})
    np.testing.assert_allclose(got["out"], out, rtol=1e-12, atol=1e-13)
    if p.lse:
        np.testing.assert_allclose(got["lse"], lse, rtol=1e-12, atol=1e-13)


def test_reference_in_small_chunks_is_the_same(monkeypatch):
    p = AttentionProblem(3, 4, 37, 64, 2, 41, "fp64", causal=True, layout="blhd", lse=True)
    x = make_inputs(p, np.random.default_rng(2))
    whole = reference(p, x)
    monkeypatch.setattr(ap, "REFERENCE_CHUNK_BYTES", 41 * 2 * 8 * 3)  # 3 rows of one (batch, kv head) pair a block
    chunked = reference(p, x)
    for name in ("out", "lse"):
        np.testing.assert_allclose(chunked[name], whole[name], rtol=1e-14, atol=1e-15)


def test_operands_of_the_wrong_shape_or_dtype_are_one_sentence():
    p = AttentionProblem(1, 4, 8, 64, 2, 8, "fp16", lse=True)
    good = {t.name: np.zeros(t.shape, np.float32 if t.dtype else np.float16) for t in p.tensors()}
    check_operands(p, good, dtypes=True)
    with pytest.raises(UsageError, match=r"k has shape \(1, 4, 8, 64\), but attention .* needs \(1, 2, 8, 64\)"):
        check_operands(p, {**good, "k": np.zeros((1, 4, 8, 64), np.float16)})
    with pytest.raises(UsageError, match="needs lse of shape"):
        check_operands(p, {k: v for k, v in good.items() if k != "lse"})
    with pytest.raises(UsageError, match="q holds float32 elements, but .* needs fp16"):
        check_operands(p, {**good, "q": np.zeros((1, 4, 8, 64), np.float32)}, dtypes=True)
    with pytest.raises(UsageError, match="lse holds float16 elements"):
        check_operands(p, {**good, "lse": np.zeros((1, 4, 8), np.float16)}, dtypes=True)


def test_suites_cover_the_issue_sweep():
    gpu = OP.suite("default", "cuda", ("fp16", "bf16"))
    assert len(gpu) == 12 and {p.head_dim for p in gpu} == {64, 128} and {p.seq for p in gpu} == {1024, 4096, 16384}
    assert all(p.batch * p.seq == 16384 and p.heads * p.head_dim == 2048 for p in gpu)
    assert {p.causal for p in gpu} == {False, True}
    own = OP.suite("attention", "cuda", ("fp16", "bf16"))
    assert any(p.kv_heads == 8 and p.heads == 32 for p in own) and any(p.seq == 1 and p.seq_k == 8192 for p in own)
    cpu = OP.suite("attention", "cpu", ("fp32", "fp64"))
    assert OP.suite("default", "cpu", ("fp32", "fp64")) and all(p.dtype in ("fp32", "fp64") for p in cpu)
    assert all(p.batch * p.heads * p.seq * p.seq_k <= 1 << 22 for p in cpu)  # small
