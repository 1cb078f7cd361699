"""The example in docs/engine_cpu.md runs as written."""

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "engine_cpu.md"


def test_the_documented_example_runs():
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert len(blocks) == 1
    namespace: dict = {}
    exec(compile(blocks[0], str(DOC), "exec"), namespace)
    assert namespace["verdict"].ok and 0 < namespace["verdict"].rel_error <= 1e-5
