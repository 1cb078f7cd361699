"""Benchmark suites: the built-in `quick` and `default` lists, and suite files.

`quick` takes seconds (CI); `default` is at most a dozen problems a user would want first: on a GPU, GEMM squares
and LLM-like shapes in the dtypes the device supports; on the CPU, fp32 and fp64 squares.

A suite file is JSON (see docs/bench.md):

    {
      "name": "llm-layers",
      "problems": [
        {"op": "gemm", "m": 4096, "n": 7168, "k": 2048, "dtype": "bf16", "layout": "nt"},
        {"m": 1024, "dtype": ["fp32", "fp64"]}
      ]
    }

Per problem: `op` (default "gemm"), `m` (required), `n` and `k` (default: m), `dtype` (a name or a list of names,
one problem each; default "fp32"), `layout` ("nn" or "nt"; default "nn"), `epilogue` (default "none").
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from tracea_cli.errors import TraceaError, UsageError
from tracea_cli.ops import check_op
from tracea_cli.ops.gemm.problem import GemmProblem

BUILTIN = ("quick", "default")
PROBLEM_FIELDS = ("op", "m", "n", "k", "dtype", "layout", "epilogue")


@dataclass(frozen=True)
class Suite:
    name: str
    problems: tuple[GemmProblem, ...]
    source: str = "built-in"  # or the suite file's path


def _gemms(rows: Iterable[tuple[int, int, int, str, str]]) -> tuple[GemmProblem, ...]:
    return tuple(GemmProblem(m=m, n=n, k=k, dtype=dtype, layout=layout) for m, n, k, dtype, layout in rows)


def _gpu_dtype(wanted: str, dtypes: tuple[str, ...]) -> str | None:
    """The dtype to use for `wanted` on a device that has `dtypes`: bf16 falls back to fp16, tf32 to nothing."""
    if wanted in dtypes:
        return wanted
    if wanted == "bf16" and "fp16" in dtypes:
        return "fp16"
    return None


def quick_suite(backend: str, dtypes: tuple[str, ...]) -> Suite:
    """Seconds of work: two small fp32 GEMMs on the CPU; on a GPU, 1024³ in fp32 and the fastest 16-bit dtype."""
    if backend == "cpu":
        return Suite("quick", _gemms([(128, 128, 128, "fp32", "nn"), (256, 256, 256, "fp32", "nn")]))
    rows = [(1024, 1024, 1024, "fp32", "nn")]
    half = _gpu_dtype("bf16", dtypes)
    if half:
        rows.append((1024, 1024, 1024, half, "nn"))
    return Suite("quick", _gemms(rows))


# (m, n, k, dtype, layout). LLM-like shapes take B as N×K (nt), as torch.nn.Linear stores weights.
_GPU_DEFAULT = (
    (2048, 2048, 2048, "fp32", "nn"),
    (4096, 4096, 4096, "fp32", "nn"),
    (4096, 4096, 4096, "tf32", "nn"),
    (4096, 4096, 4096, "fp16", "nn"),
    (4096, 4096, 4096, "bf16", "nn"),
    (8192, 8192, 8192, "bf16", "nn"),
    (4096, 7168, 2048, "bf16", "nt"),
    (4096, 2112, 7168, "bf16", "nt"),
    (4096, 4096, 7168, "bf16", "nt"),
    (4096, 32768, 512, "bf16", "nt"),
    (16, 4096, 4096, "bf16", "nt"),  # small M: decoding one token for 16 sequences
    (1000, 3000, 777, "fp16", "nn"),  # awkward: no dimension a multiple of 64
)
_CPU_DEFAULT = (
    (512, 512, 512, "fp32", "nn"),
    (1024, 1024, 1024, "fp32", "nn"),
    (2048, 2048, 2048, "fp32", "nn"),
    (512, 512, 512, "fp64", "nn"),
    (1024, 1024, 1024, "fp64", "nn"),
)


def default_suite(backend: str, dtypes: tuple[str, ...]) -> Suite:
    if backend == "cpu":
        return Suite("default", _gemms(r for r in _CPU_DEFAULT if r[3] in dtypes))
    rows = []
    for m, n, k, dtype, layout in _GPU_DEFAULT:
        chosen = _gpu_dtype(dtype, dtypes)
        if chosen and (m, n, k, chosen, layout) not in rows:
            rows.append((m, n, k, chosen, layout))
    return Suite("default", _gemms(rows))


def single(problem: GemmProblem) -> Suite:
    return Suite(problem.label, (problem,), source="command line")


def _entry_problems(entry: Any, where: str) -> list[GemmProblem]:
    if not isinstance(entry, Mapping):
        raise UsageError(f"{where} is not an object with m, n, k, dtype fields.", "See docs/bench.md for the suite file format.")
    unknown = sorted(set(entry) - set(PROBLEM_FIELDS))
    if unknown:
        raise UsageError(f"{where} has unknown field(s) {', '.join(unknown)}.", f"Use only {', '.join(PROBLEM_FIELDS)}.")
    if "m" not in entry:
        raise UsageError(f"{where} has no m.", "Give at least m; n and k default to m.")
    op = entry.get("op", "gemm")
    if not isinstance(op, str):
        raise UsageError(f"{where} has op {op!r}, which is not a name.", "Use \"gemm\".")
    check_op(op)
    dtypes = entry.get("dtype", "fp32")
    dtypes = [dtypes] if isinstance(dtypes, str) else dtypes
    if not isinstance(dtypes, list) or not dtypes or not all(isinstance(d, str) for d in dtypes):
        raise UsageError(f"{where} has dtype {entry.get('dtype')!r}; give a name or a list of names.", "For example \"bf16\" or [\"fp32\", \"fp64\"].")
    m = entry["m"]
    out = []
    for dtype in dtypes:
        try:
            out.append(
                GemmProblem(
                    m=m,
                    n=entry.get("n", m),
                    k=entry.get("k", m),
                    dtype=dtype,
                    layout=entry.get("layout", "nn"),
                    epilogue=entry.get("epilogue", "none"),
                )
            )
        except TraceaError as e:
            raise UsageError(f"{where}: {e.message}", e.hint) from None
    return out


def parse_suite(doc: Any, *, source: str) -> Suite:
    """A suite from a parsed suite document; raises UsageError naming the first bad entry."""
    if not isinstance(doc, Mapping) or "problems" not in doc:
        raise UsageError(f"the suite file {source} has no \"problems\" list.", "See docs/bench.md for the suite file format.")
    unknown = sorted(set(doc) - {"name", "problems", "description"})
    if unknown:
        raise UsageError(f"the suite file {source} has unknown field(s) {', '.join(unknown)}.", "Use name, description and problems.")
    entries = doc["problems"]
    if not isinstance(entries, list) or not entries:
        raise UsageError(f"the suite file {source} lists no problems.", "Give at least one problem.")
    problems: list[GemmProblem] = []
    for i, entry in enumerate(entries):
        for p in _entry_problems(entry, f"problem {i + 1} of the suite file {source}"):
            if p not in problems:
                problems.append(p)
    name = doc.get("name") or Path(source).stem
    return Suite(name=str(name), problems=tuple(problems), source=source)


def load_suite_file(path: Path) -> Suite:
    path = Path(path).expanduser()
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise UsageError(f"the suite file {path} does not exist.", "Use --suite quick, --suite default or the path of a suite file.") from None
    except (OSError, UnicodeDecodeError) as e:
        reason = getattr(e, "strerror", None) or str(e)
        raise UsageError(f"cannot read the suite file {path}: {reason}.", "Check the path and its permissions.") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise UsageError(f"the suite file {path} is not valid JSON (line {e.lineno}: {e.msg}).", "See docs/bench.md for the suite file format.") from None
    return parse_suite(doc, source=str(path))


def looks_like_path(spec: str) -> bool:
    return "/" in spec or "\\" in spec or spec.endswith(".json") or Path(spec).exists()


def resolve_suite(spec: str, *, backend: str, dtypes: tuple[str, ...]) -> Suite:
    """`quick`, `default` or a suite file's path. An unknown name is a usage error that lists the choices."""
    if spec == "quick":
        return quick_suite(backend, dtypes)
    if spec == "default":
        return default_suite(backend, dtypes)
    if looks_like_path(spec):
        return load_suite_file(Path(spec))
    raise UsageError(f"unknown suite {spec!r}.", "Use --suite quick, --suite default or the path of a suite file (JSON).")
