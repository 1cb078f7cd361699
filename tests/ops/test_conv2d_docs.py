"""docs/conv2d.md says what the code does: its bad-input sentences are the ones raised, its suite file parses into
the problems it describes, and its option table names every option."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tracea_cli.bench.suites import parse_suite
from tracea_cli.errors import UsageError
from tracea_cli.ops.registry import get_op

DOC = (Path(__file__).parents[2] / "docs" / "conv2d.md").read_text()
OP = get_op("conv2d")
BASE = {"h": 8, "c": 4, "k": 4, "r": 3}


@pytest.mark.parametrize("values", [dict(h=2, r=5), dict(groups=2), dict(stride=0), dict(pad=-1)])
def test_the_bad_input_sentences_are_the_ones_raised(values):
    with pytest.raises(UsageError) as e:
        OP.problem(**{**BASE, **values})
    assert e.value.message in DOC
    assert e.value.hint is None or e.value.hint in DOC


def test_the_suite_file_example_parses():
    text = re.search(r"```json\n(.*?)```", DOC, re.S).group(1)
    suite = parse_suite(json.loads(text), source="docs/conv2d.md")
    assert [p.label for p in suite.problems] == [
        "conv2d n1 64->64 @56x56 3x3 pad 1 fp32 +bias_relu",
        "conv2d n1 3->64 @224x224 7x7 stride 2 pad 3 fp32",
        "conv2d n1 3->64 @224x224 7x7 stride 2 pad 3 fp64",
    ]


def test_every_option_is_in_the_table():
    for option in OP.options:
        assert f"`{option.flag}`" in DOC, option.flag
