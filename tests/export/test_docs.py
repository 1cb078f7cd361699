"""The export guide and the manifest schema document are run and checked: the guide's command and C++ program work,
the schema document's example is valid and its table covers every field, the error codes agree with the header."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from export_helpers import build, cli, needs_nvrtc, run_with_fake

from tracea_cli.export.c_header import RUNTIME_HEADER, template
from tracea_cli.export.manifest import schema, validate
from tracea_cli.ops.registry import get_op

DOCS = Path(__file__).resolve().parents[2] / "docs"


def blocks(name: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", (DOCS / name).read_text(), re.S)


@needs_nvrtc
@pytest.mark.timeout(600)
def test_the_guides_first_command_and_its_cpp_program_work(tmp_path, toolchain, fake_driver):
    command = shlex.split(blocks("export.md", "sh")[0].strip())
    assert command[:2] == ["tracea", "export"]
    out = tmp_path / command[command.index("--out") + 1]
    command[command.index("--out") + 1] = str(out)
    result = cli(command[2:], tmp_path)
    assert result.exit_code == 0, result.output
    (program,) = blocks("export.md", "cpp")
    (tmp_path / "program.cpp").write_text(program)
    binary = build(toolchain["cxx"], [str(tmp_path / "program.cpp")], tmp_path / "program", [str(out), toolchain["include"]],
                   "-std=c++17", "-O2", "-Wall", "-Werror", "-ldl", "-lpthread")
    stdout, log = run_with_fake(binary, [], fake_driver, cc="9.0")
    assert stdout == ["ok"] and any(line.startswith("launch ") and "m=2048" in line for line in log)


def test_the_schema_documents_examples_are_valid_and_its_table_covers_every_field():
    SCHEMA = schema(get_op("gemm"))  # the schema of GEMM's manifests, which the document's examples are
    documents = [json.loads(block) for block in blocks("manifest-schema.md", "json")]
    (example,) = [d for d in documents if "schema_version" in d]
    assert validate(example) == []
    (hopper,) = [d for d in documents if "schema_version" not in d]  # the Hopper family's kernels and launch entries
    for name in ("kernels", "launch"):
        for entry in hopper[name]:
            assert validate(entry, SCHEMA["properties"][name]["items"]) == []
    whole = {**example, "shape": [hopper["launch"][0]["shape"]], "dtype": "fp16", "layout": "nt",
             "kernels": hopper["kernels"], "launch": hopper["launch"], "ptx": {"files": [], "note": "none"},
             "config": [{**example["config"][0], "shape": hopper["launch"][0]["shape"], "arch": "sm_90a"}],
             "verification": [{**example["verification"][0], "shape": hopper["launch"][0]["shape"], "arch": "sm_90a"}]}
    assert validate(whole) == []  # and its cross-references hold
    text = (DOCS / "manifest-schema.md").read_text()
    missing = [name for name in SCHEMA["properties"] if f"| `{name}` |" not in text]
    assert missing == []


def test_the_guides_error_codes_are_the_headers():
    header = dict((name, int(value)) for name, value in re.findall(r"^\s+(TRACEA_(?:OK|ERROR_\w+)) = (\d+)",
                                                                     template(RUNTIME_HEADER), re.M))
    documented = dict((name, int(value)) for name, value in re.findall(r"^\| `(TRACEA_\w+)` \| (\d+) \|",
                                                                       (DOCS / "export.md").read_text(), re.M))
    assert documented == header and len(header) == 13
