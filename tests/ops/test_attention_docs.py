"""docs/attention.md says what the code does: its bad-input sentences are the ones raised, its suite file parses into
the problems it describes, its option table names every option, and its baseline table every baseline."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from tracea_cli.bench.suites import parse_suite
from tracea_cli.errors import UsageError
from tracea_cli.ops.attention.baselines import BASELINES
from tracea_cli.ops.attention.problem import AttentionProblem, check_operands
from tracea_cli.ops.registry import get_op

ROOT = Path(__file__).parents[2]
DOC = (ROOT / "docs" / "attention.md").read_text()
OP = get_op("attention")
BASE = {"heads": 8, "seq": 64, "head_dim": 64}


@pytest.mark.parametrize("values", [dict(head_dim=96), dict(kv_heads=3), dict(seq_k=32, causal=True), dict(seq=0),
                                    dict(layout="bshd")])
def test_the_bad_input_sentences_are_the_ones_raised(values):
    with pytest.raises(UsageError) as e:
        OP.problem(**{**BASE, **values})
    assert e.value.message in DOC
    assert e.value.hint is None or e.value.hint in DOC


def test_the_wrong_array_sentences_are_the_ones_raised():
    p = AttentionProblem(1, 4, 8, 64, 2, 8, "fp16", lse=True)
    arrays = {t.name: np.zeros(t.shape, np.float32 if t.dtype else np.float16) for t in p.tensors()}
    with pytest.raises(UsageError) as e:
        check_operands(p, {**arrays, "k": np.zeros((1, 4, 8, 64), np.float16)})
    assert e.value.message in DOC
    with pytest.raises(UsageError) as e:
        check_operands(p, {**arrays, "q": np.zeros((1, 4, 8, 64), np.float32)}, dtypes=True)
    assert e.value.message.replace(p.label, "...") in DOC


def test_the_suite_file_example_parses():
    text = re.search(r"```json\n(.*?)```", DOC, re.S).group(1)
    suite = parse_suite(json.loads(text), source="docs/attention.md")
    assert [p.label for p in suite.problems] == ["attention b4 h32/kv8 L4096 d128 bf16 bhld causal",
                                                 "attention b8 h32/kv8 L1x8192 d128 bf16 bhld"]


def test_every_option_and_baseline_is_in_the_tables():
    for option in OP.options:
        assert f"`{option.flag}" in DOC, option.flag
    for baseline in BASELINES:
        assert f"| `{baseline.name}" in DOC, baseline.name
