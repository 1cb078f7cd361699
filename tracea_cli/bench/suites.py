"""Benchmark suites: the built-in ones, made of every op's rows, and suite files.

Built in: `quick` (seconds, CI), `default` (what a user wants first), one suite per op (its benchmark shapes, named
after it: `gemm`, ...) and `full` (every op's own suite). Each op supplies its rows (ops/base.Op.suite) in the
dtypes the device runs.

A suite file is JSON (see docs/bench.md):

    {
      "name": "llm-layers",
      "problems": [
        {"op": "gemm", "m": 4096, "n": 7168, "k": 2048, "dtype": "bf16", "layout": "nt"},
        {"m": 1024, "dtype": ["fp32", "fp64"]}
      ]
    }

Per problem: `op` (default: the registry's DEFAULT_OP, for files written when it was the only one) and the op's own
options (`tracea tune OP --help` lists them), with their defaults; `dtype` may be a list of names, one problem each.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from tracea_cli.errors import TraceaError, UsageError
from tracea_cli.files import read_json
from tracea_cli.ops.registry import DEFAULT_OP, get_op, op_names

SHARED = ("quick", "default", "full")
_HINT = "See docs/bench.md for the suite file format."


@dataclass(frozen=True)
class Suite:
    name: str
    problems: tuple[Any, ...]
    source: str = "built-in"  # or the suite file's path


def builtin_names() -> tuple[str, ...]:
    return (*SHARED[:2], *op_names(), SHARED[2])


def builtin_suite(name: str, *, backend: str, dtypes: tuple[str, ...]) -> Suite:
    """`quick`, `default`, an op's own suite or `full`, for `backend` in the dtypes its device runs."""
    if name in SHARED[:2]:
        parts = [(op, name) for op in op_names()]
    elif name == "full":
        parts = [(op, op) for op in op_names()]
    else:
        parts = [(name, name)]
    problems: list[Any] = []
    for op_name, row_set in parts:
        problems += [p for p in get_op(op_name).suite(row_set, backend, dtypes) if p not in problems]
    return Suite(name, tuple(problems))


def single(problem: Any) -> Suite:
    return Suite(problem.label, (problem,), source="command line")


def _entry_problems(entry: Any, where: str) -> list[Any]:
    if not isinstance(entry, Mapping):
        raise UsageError(f"{where} is not an object naming an op's options.", _HINT)
    op_name = entry.get("op", DEFAULT_OP)
    if not isinstance(op_name, str):
        raise UsageError(f"{where} has op {op_name!r}, which is not a name.", f"Use one of {', '.join(op_names())}.")
    try:
        op = get_op(op_name)
    except TraceaError as e:
        raise UsageError(f"{where}: {e.message}", e.hint) from None
    declared = [o.name for o in op.options]
    unknown = sorted(set(entry) - {"op", *declared})
    if unknown:
        raise UsageError(f"{where} has unknown field(s) {', '.join(unknown)} for {op_name}.",
                         f"Use op and {', '.join(declared)}.")
    values = {k: v for k, v in entry.items() if k != "op"}
    dtypes = values.get("dtype")
    dtypes = [dtypes] if dtypes is None or isinstance(dtypes, str) else dtypes
    if not isinstance(dtypes, list) or not dtypes or not all(d is None or isinstance(d, str) for d in dtypes):
        raise UsageError(f"{where} has dtype {entry.get('dtype')!r}; give a name or a list of names.",
                         "For example \"bf16\" or [\"fp32\", \"fp64\"].")
    out = []
    for dtype in dtypes:
        try:
            out.append(op.problem(**{**values, "dtype": dtype}))
        except TraceaError as e:
            raise UsageError(f"{where}: {e.message}", e.hint) from None
        except TypeError as e:  # a value of the wrong type for the op's problem
            raise UsageError(f"{where}: {e}.", _HINT) from None
    return out


def parse_suite(doc: Any, *, source: str) -> Suite:
    """A suite from a parsed suite document; raises UsageError naming the first bad entry."""
    if not isinstance(doc, Mapping) or "problems" not in doc:
        raise UsageError(f"the suite file {source} has no \"problems\" list.", _HINT)
    unknown = sorted(set(doc) - {"name", "problems", "description"})
    if unknown:
        raise UsageError(f"the suite file {source} has unknown field(s) {', '.join(unknown)}.", "Use name, description and problems.")
    entries = doc["problems"]
    if not isinstance(entries, list) or not entries:
        raise UsageError(f"the suite file {source} lists no problems.", "Give at least one problem.")
    problems: list[Any] = []
    for i, entry in enumerate(entries):
        for p in _entry_problems(entry, f"problem {i + 1} of the suite file {source}"):
            if p not in problems:
                problems.append(p)
    name = doc.get("name") or Path(source).stem
    return Suite(name=str(name), problems=tuple(problems), source=source)


def load_suite_file(path: Path) -> Suite:
    doc = read_json(Path(path), "suite file", "Use --suite quick, --suite default or the path of a suite file.")
    return parse_suite(doc, source=str(Path(path).expanduser()))


def looks_like_path(spec: str) -> bool:
    return "/" in spec or "\\" in spec or spec.endswith(".json") or Path(spec).exists()


def check_suite_name(spec: str) -> None:
    """A usage error, before any work, when `spec` is neither a built-in suite nor looks like a file."""
    if not spec.strip():
        raise UsageError("--suite was given an empty name.", f"Use one of {', '.join(builtin_names())} or a suite file.")
    if spec not in builtin_names() and not looks_like_path(spec):
        raise UsageError(f"unknown suite {spec!r}.", f"Use one of {', '.join(builtin_names())}, or the path of a "
                                                     "suite file (JSON).")


def resolve_suite(spec: str, *, backend: str, dtypes: tuple[str, ...]) -> Suite:
    """A built-in suite or a suite file's path. An unknown name is a usage error that lists the choices."""
    check_suite_name(spec)
    if spec in builtin_names():
        return builtin_suite(spec, backend=backend, dtypes=dtypes)
    return load_suite_file(Path(spec))
