"""docs/lowrank-mlp.md says what the code does: its bad-input sentences are the ones raised, its suite file parses
into the problems it describes, its option table names every option, and its C++ snippet uses names the exported
headers have."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from tracea_cli.bench.suites import parse_suite
from tracea_cli.errors import UsageError
from tracea_cli.ops.lowrank_mlp.problem import check_operands
from tracea_cli.ops.registry import get_op

ROOT = Path(__file__).parents[2]
DOC = (ROOT / "docs" / "lowrank-mlp.md").read_text()
OP = get_op("lowrank-mlp")
BASE = {"m": 256, "d_in": 128, "rank": 16}


@pytest.mark.parametrize("values", [dict(rank=0), dict(rank=200), dict(m=0), dict(act="tanh")])
def test_the_bad_input_sentences_are_the_ones_raised(values):
    with pytest.raises(UsageError) as e:
        OP.problem(**{**BASE, **values})
    assert e.value.message in DOC
    assert e.value.hint is None or e.value.hint in DOC


def test_the_wrong_shape_sentence_is_the_one_raised():
    p = OP.problem(m=9, d_in=7, rank=3, d_out=5, residual=True)
    arrays = {t.name: np.zeros(t.shape) for t in p.tensors()}
    with pytest.raises(UsageError) as e:
        check_operands(p, {**arrays, "residual": np.zeros((9, 4))})
    assert e.value.message in DOC and e.value.hint in DOC


def test_the_suite_file_example_parses():
    text = re.search(r"```json\n(.*?)```", DOC, re.S).group(1)
    suite = parse_suite(json.loads(text), source="docs/lowrank-mlp.md")
    assert [p.label for p in suite.problems] == [
        "lowrank-mlp 16384x4096->r64->4096 fp16 nn +bias_silu",
        "lowrank-mlp 16384x4096->r64->4096 bf16 nn +bias_silu",
        "lowrank-mlp 1000x300->r48->500 fp32 nn +residual",
    ]


def test_every_option_is_in_the_table():
    for option in OP.options:
        assert f"`{option.flag}" in DOC, option.flag


def test_the_cpp_snippet_names_what_the_headers_declare():
    header = (ROOT / "tracea_cli" / "ops" / "lowrank_mlp" / "export" / "tracea_lowrank_mlp.h").read_text()
    runtime = (ROOT / "tracea_cli" / "export" / "templates" / "tracea_runtime.h").read_text()
    snippet = re.search(r"```cpp\n(.*?)```", DOC, re.S).group(1)
    for name in ("LowrankMlpParams", "LowrankAct", "lowrank_mlp(const TensorView& x"):
        assert name.split("(")[0] in snippet and name in header
    assert "Float16 = fp16" in runtime and "TensorView(void* data_, std::initializer_list<int64_t> dims_, DType" in runtime
