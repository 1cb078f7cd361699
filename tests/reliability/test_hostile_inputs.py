"""A hostile-input sweep over every command: invocations generated from the commands' own options (walked from the
click tree, so a new option is swept too), each with one value that is wrong for its option — of the wrong type,
empty, not a number, a special file, a folder, a missing file, JSON nested 100,000 deep, garbage bytes, an option
that does not exist or belongs to another op. Every one must exit 2 with one sentence ("error: ..."), no
traceback, no internal error, within the test's time limit. All of them run (about 200, in well under a minute):
the list is deterministic, so a failure names the same invocation on every machine."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tracea_cli.cli import app

# a valid start for each command, so that only the hostile part is wrong (CPU backend: nothing needs a GPU)
BASES: dict[tuple[str, ...], list[str]] = {
    ("doctor",): [],
    ("tune",): [],  # the group itself: --replay FILE and the search's options
    ("tune", "gemm"): ["--m", "64", "--backend", "cpu"],
    ("bench",): ["--backend", "cpu"],
    ("bench", "gemm"): ["--m", "64", "--backend", "cpu"],
    ("export", "gemm"): ["--m", "64"],
    ("cache", "ls"): [],
    ("cache", "show"): ["0000"],
    ("cache", "export"): ["out.json"],
    ("cache", "import"): ["{file}"],
    ("cache", "prune"): ["--dry-run"],
}
# options naming something to write: an existing file or a missing path is a valid answer there
OUTPUT_FILES = {"--output"}
OUTPUT_FOLDERS = {"--output-dir", "--out", "--cache"}
# positional arguments that are files to read: hostile files go there too
READ_ARGS = {("cache", "import")}


def _files(folder: Path) -> dict[str, str]:
    """Hostile files, made once per test folder."""
    folder.mkdir(parents=True, exist_ok=True)
    nested = folder / "nested.json"
    nested.write_text("[" * 100_000)
    garbage = folder / "garbage.json"
    garbage.write_bytes(bytes(range(256)) * 64)
    wrong = folder / "wrong.json"
    wrong.write_text('{"schema": "not-tracea", "version": 99}')
    (folder / "a-folder").mkdir(exist_ok=True)
    return {"nested": str(nested), "garbage": str(garbage), "wrong": str(wrong), "folder": str(folder / "a-folder"),
            "missing": str(folder / "missing.json"), "zero": "/dev/zero", "null": "/dev/null"}


def _leaf_commands():
    import typer

    root = typer.main.get_command(app)
    ctx = root.make_context("tracea", ["--help"], resilient_parsing=True)
    for path, base in BASES.items():
        command, sub = root, ctx
        for name in path:
            command = command.get_command(sub, name)
            sub = command.make_context(name, [], parent=sub, resilient_parsing=True)
        yield path, base, command


def _kind(param) -> str:
    """int, float, bool, path or str: the value type an option takes (typer >= 0.29 keeps it in type_descriptor)."""
    import typing

    descriptor = getattr(param, "type_descriptor", None)
    annotation = descriptor.annotation if descriptor is not None else getattr(getattr(param, "type", None), "name", "")
    while typing.get_args(annotation):  # Optional[X], list[X]
        annotation = next(a for a in typing.get_args(annotation) if a is not type(None))
    if isinstance(annotation, str):  # click's type names
        return {"integer": "int", "float": "float", "boolean": "bool", "path": "path"}.get(annotation, "str")
    if annotation is Path or (isinstance(annotation, type) and issubclass(annotation, os.PathLike)):
        return "path"
    return {int: "int", float: "float", bool: "bool"}.get(annotation, "str")


def _hostile_values(param, files: dict[str, str]) -> list[tuple[str, list[str]]]:
    """(what, args) pairs that are wrong for option `param`."""
    flag = param.opts[0]
    kind = _kind(param)
    if getattr(param, "is_flag", False) or kind == "bool":
        return []
    if flag in OUTPUT_FILES:  # where a file is to be written: a folder stands in the way
        return [(f"{flag} <a folder>", [flag, files["folder"]])]
    if flag in OUTPUT_FOLDERS:  # where a folder is to be made or used: a file stands in the way
        return [(f"{flag} <a file>", [flag, files["garbage"]])]
    values = {"int": ["abc", "1.5", "", "nan"], "float": ["abc", "", "nan"],
              "path": [files[k] for k in ("nested", "garbage", "wrong", "folder", "missing", "zero")],
              "str": ["bogus", "", "\x01\x02"]}[kind]
    return [(f"{flag} {v!r}", [flag, v]) for v in values]


def hostile_invocations(files: dict[str, str]) -> list[tuple[str, list[str]]]:
    out: list[tuple[str, list[str]]] = []
    for path, base, command in _leaf_commands():
        base = [a.format(file=files["wrong"]) for a in base]
        for param in command.params:
            if param.param_type_name != "option" or "--help" in param.opts:
                continue
            for what, args in _hostile_values(param, files):
                out.append((f"{' '.join(path)} {what}", [*path, *base, *args]))
        out.append((f"{' '.join(path)} --bogus", [*path, *base, "--bogus", "1"]))
        if path in READ_ARGS:
            for name in ("nested", "garbage", "wrong", "folder", "missing", "zero", "null"):
                out.append((f"{' '.join(path)} FILE={name}", [*path, files[name]]))
    out.append(("tune gemm --h 56 (another op's option)", ["tune", "gemm", "--m", "64", "--h", "56"]))
    out.append(("tune gemm without --m", ["tune", "gemm", "--backend", "cpu"]))
    out.append(("tune of an unknown op", ["tune", "conv3d", "--m", "64"]))
    return out


# The ids are made with placeholder paths; each test rebuilds its invocation from its index in a real folder.
_IDS = [what for what, _ in hostile_invocations(_files(Path(os.environ.get("TMPDIR", "/tmp")) / "tracea-hostile-ids"))]


def test_the_sweep_is_wide_enough():
    files = _files(Path(os.environ.get("TMPDIR", "/tmp")) / "tracea-hostile-ids")
    every = hostile_invocations(files)
    assert len(every) >= 100 and len({tuple(a[:2]) for _, a in every}) >= 8


@pytest.mark.timeout(60)
@pytest.mark.parametrize("index", range(len(_IDS)), ids=_IDS)
def test_hostile_input_is_one_sentence_and_exit_2(index, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    files = _files(tmp_path / "files")
    what, args = hostile_invocations(files)[index]
    env = {"TRACEA_CACHE_DIR": str(tmp_path / "cache"), "TRACEA_DATA_DIR": str(tmp_path / "data"), "NO_COLOR": "1",
           "COLUMNS": "200"}
    result = CliRunner().invoke(app, args, env=env)
    said = result.output
    assert "Traceback" not in said and "internal error" not in said, said
    assert result.exit_code == 2, f"{what}: exit {result.exit_code}\n{said}"
    assert "error" in said.lower(), said
