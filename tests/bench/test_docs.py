"""The suite file example in docs/bench.md is a valid suite and means what the guide says."""

import json
import re
from pathlib import Path

from tracea_cli.bench.suites import parse_suite

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "bench.md"


def test_the_guide_s_suite_file_example_parses():
    blocks = re.findall(r"```json\n(.*?)```", GUIDE.read_text(), flags=re.S)
    assert len(blocks) == 1
    suite = parse_suite(json.loads(blocks[0]), source="docs/bench.md")
    assert suite.name == "llm-layers"
    assert [p.label for p in suite.problems] == [
        "gemm 4096x7168x2048 bf16 nt",
        "gemm 4096x2112x7168 bf16 nt",
        "gemm 4096x2112x7168 fp16 nt",
        "gemm 1024x1024x1024 fp32 nn",
        "gemm 1024x1024x1024 fp64 nn",
    ]
