"""The export/import file: a versioned JSON document of keys, trials, winners and search state (docs/cache-format.md).

Reading checks everything before anything is written: the document's structure and types, each key's fields, and
every configuration against the op's search space (through the caller's validator). Configurations are flat
objects of scalar values; nothing in the file is ever compiled or executed as given.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from tracea_cli import __version__
from tracea_cli.cache.records import (
    KEY_SCHEMA_VERSION,
    STATUSES,
    CacheKey,
    SearchState,
    Trial,
    iso_time,
    parse_iso_time,
)
from tracea_cli.cache.legacy import from_legacy, legacy_digest
from tracea_cli.errors import TraceaError, UsageError
from tracea_cli.files import read_json
from tracea_cli.space import Value

FORMAT = "tracea-cache-export"
FORMAT_VERSION = 2  # 1: GEMM keys with layout, shape and epilogue fields (read through cache/legacy.py)

Validator = Callable[[CacheKey, Mapping[str, Value]], "str | None"]


@dataclass(frozen=True)
class ImportEntry:
    """One checked entry of an import file."""

    key: CacheKey
    trials: tuple[Trial, ...]
    winner: Trial | None
    search: SearchState | None
    baseline: tuple[str, Trial] | None = None


# ---- writing ------------------------------------------------------------------------------------------------------


def entry(
    key: CacheKey,
    trials: list[Trial],
    winner: Trial | None,
    search: SearchState | None,
    baseline: tuple[str, Trial] | None = None,
) -> dict[str, Any]:
    return {
        "key": key.as_dict(),
        "search": search.as_dict() if search else None,
        "winner": winner.as_dict() if winner else None,
        "baseline": {"name": baseline[0], **baseline[1].as_dict()} if baseline else None,
        "trials": [t.as_dict() for t in trials],
    }


def document(entries: list[dict[str, Any]]) -> dict[str, Any]:
    import time

    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "tracea_version": __version__,
        "exported": iso_time(time.time()),
        "entries": entries,
    }


# ---- reading ------------------------------------------------------------------------------------------------------


class _Bad(Exception):
    """A problem with one part of the file; turned into a UsageError that names where it is."""


def read_import(path: Path, validate: Validator) -> list[ImportEntry]:
    """Read and check an export file. Raises UsageError naming the file and the first bad entry."""
    hint = "Give a file from `tracea cache export`."
    data = read_json(Path(path), "import file", hint)
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise UsageError(f"{path} is not a Tracea cache export (no \"format\": \"{FORMAT}\").", hint)
    version = data.get("format_version")
    if not _is_int(version) or version < 1:
        raise UsageError(f"{path} has no valid format_version.", hint)
    if version > FORMAT_VERSION:
        raise UsageError(
            f"{path} uses export format {version}; this Tracea reads up to {FORMAT_VERSION}.", "Upgrade Tracea to import it."
        )
    entries = data.get("entries")
    if not isinstance(entries, list):
        raise UsageError(f"{path} has no \"entries\" list.", hint)
    checked = []
    for i, raw in enumerate(entries):
        label = _entry_label(raw)
        try:
            checked.append(_read_entry(raw, validate, version))
        except (_Bad, TraceaError) as e:
            text = e.message if isinstance(e, TraceaError) else str(e)
            raise UsageError(
                f"{path}: entry {i}{label} is refused: {text.rstrip('.')}.",
                "Nothing was imported; fix or remove that entry and import again.",
            ) from None
    return checked


def _entry_label(raw: Any) -> str:
    try:
        key = raw["key"]
        sizes = key.get("sizes") or key["shape"]
        return f" ({key['op']} {'x'.join(str(v) for v in sizes.values())} {key['dtype']} on {key['backend']})"
    except Exception:
        return ""


def _read_entry(raw: Any, validate: Validator, version: int) -> ImportEntry:
    _require(isinstance(raw, dict), "it is not an object")
    key = _read_key(raw.get("key"), version)
    trials = raw.get("trials", [])
    _require(isinstance(trials, list), "\"trials\" is not a list")
    read_trials = tuple(_read_trial(t, f"trial {j}") for j, t in enumerate(trials))
    winner = None if raw.get("winner") is None else _read_trial(raw["winner"], "the winner")
    if winner is not None:
        _require(winner.ok and winner.median_ms is not None, "the winner is not a correct, timed trial")
    verdicts: dict[str, str | None] = {}
    for where, trial in [*((f"trial {j}", t) for j, t in enumerate(read_trials)), ("the winner", winner)]:
        if trial is None:
            continue
        ck = trial.config_key
        if ck not in verdicts:
            verdicts[ck] = validate(key, trial.config)
        if verdicts[ck]:
            raise _Bad(f"{where} has a configuration outside the search space ({ck}): {verdicts[ck]}")
    search = None if raw.get("search") is None else _read_search(raw["search"])
    baseline = None if raw.get("baseline") is None else _read_baseline(raw["baseline"])
    return ImportEntry(key, read_trials, winner, search, baseline)


def _read_baseline(raw: Any) -> tuple[str, Trial]:
    _require(isinstance(raw, dict), "\"baseline\" is not an object")
    name = raw.get("name")
    _require(isinstance(name, str) and 0 < len(name) <= 64, "baseline.name is not a short text")
    trial = _read_trial(raw, "the baseline", library=True)
    _require(trial.ok and trial.median_ms is not None, "the baseline is not a correct, timed trial")
    return name, trial


def _text(raw: Mapping[str, Any], name: str, limit: int = 256) -> str:
    _require(isinstance(raw.get(name), str) and 0 < len(raw[name]) <= limit, f"key.{name} is missing or not a short text")
    return raw[name]


def _sizes(raw: Any, name: str) -> dict[str, int]:
    _require(
        isinstance(raw, dict) and raw and all(isinstance(k, str) and _is_int(v) and v > 0 for k, v in raw.items()),
        f"key.{name} is not an object of positive whole numbers",
    )
    return raw


def _read_key(raw: Any, version: int) -> CacheKey:
    _require(isinstance(raw, dict), "\"key\" is missing or not an object")
    fields = {name: _text(raw, name) for name in ("op", "backend", "dtype", "device_class", "source_hash")}
    arch = raw.get("arch")
    _require(arch is None or (isinstance(arch, str) and 0 < len(arch) <= 32), "key.arch is not a short text or null")
    toolchain = raw.get("toolchain", {})
    _require(
        isinstance(toolchain, dict) and all(isinstance(v, str) for v in toolchain.values()),
        "key.toolchain is not an object of version texts",
    )
    schema = raw.get("schema_version", KEY_SCHEMA_VERSION)
    _require(_is_int(schema), "key.schema_version is not a whole number")
    common = {**fields, "arch": arch, "toolchain": toolchain, "schema_version": schema}
    given = raw.get("id")
    _require(given is None or (isinstance(given, str) and 0 < len(given) <= 64), "key.id is not a short text")
    if version == 1:  # GEMM's fixed fields (cache/legacy.py); the id is checked against the one they had
        old = {**common, "layout": _text(raw, "layout", 64), "shape": _sizes(raw.get("shape"), "shape"),
               "epilogue": raw.get("epilogue", "none")}
        _require(isinstance(old["epilogue"], str) and 0 < len(old["epilogue"]) <= 64, "key.epilogue is not a short text")
        _require(given is None or legacy_digest(**old).startswith(given), "key.id does not match its fields")
        return from_legacy(**old)
    problem = raw.get("problem")
    _require(isinstance(problem, dict) and problem and all(isinstance(k, str) and len(k) <= 64 and _is_plain(v)
                                                           for k, v in problem.items()),
             "key.problem is not an object of plain values")
    key = CacheKey(problem=problem, sizes=_sizes(raw.get("sizes"), "sizes"), **common)
    _require(given is None or key.digest.startswith(given), "key.id does not match its fields")
    return key


def _read_trial(raw: Any, where: str, *, library: bool = False) -> Trial:
    """A trial of a kernel configuration, or (`library`) of a vendor library, whose config is empty."""
    _require(isinstance(raw, dict), f"{where} is not an object")
    config = raw.get("config", {} if library else None)
    if library:
        _require(config == {}, f"{where}: config must be empty")
    _require(
        isinstance(config, dict) and (config or library) and all(_is_scalar(v) for v in config.values()),
        f"{where}: config is not an object of plain values",
    )
    status = raw.get("status")
    _require(status in STATUSES, f"{where}: status {status!r} is not one of {', '.join(STATUSES)}")
    reason = raw.get("reason", "")
    _require(isinstance(reason, str) and len(reason) <= 20_000, f"{where}: reason is not a text")
    samples = raw.get("samples_ms", [])
    _require(isinstance(samples, list) and all(_is_time(s) for s in samples), f"{where}: samples_ms is not a list of times")
    median = raw.get("median_ms")
    cv, rel_error = raw.get("cv"), raw.get("rel_error")
    _require(median is None or (_is_time(median) and median > 0), f"{where}: median_ms is not a positive time")
    _require(status != "ok" or median is not None, f"{where}: a correct trial has no median_ms")
    _require(cv is None or (_is_number(cv) and cv >= 0), f"{where}: cv is not a non-negative number")
    _require(rel_error is None or (_is_number(rel_error) and rel_error >= 0), f"{where}: rel_error is not a non-negative number")
    compile_s = raw.get("compile_s", 0.0)
    _require(_is_number(compile_s) and compile_s >= 0, f"{where}: compile_s is not a non-negative number")
    return Trial(
        config=config, status=status, reason=reason, samples_ms=tuple(samples), median_ms=median, cv=cv,
        rel_error=rel_error, compile_s=float(compile_s), timestamp=_read_time(raw.get("timestamp"), f"{where}: timestamp"),
    )


def _read_search(raw: Any) -> SearchState:
    _require(isinstance(raw, dict), "\"search\" is not an object")
    strategy = raw.get("strategy")
    _require(isinstance(strategy, str) and 0 < len(strategy) <= 64, "search.strategy is not a short text")
    for name in ("budget", "evaluations"):
        _require(_is_int(raw.get(name)) and raw[name] >= 0, f"search.{name} is not a whole number >= 0")
    _require(isinstance(raw.get("converged"), bool), "search.converged is not true or false")
    return SearchState(
        strategy=strategy, budget=raw["budget"], evaluations=raw["evaluations"], converged=raw["converged"],
        started=_read_time(raw.get("started"), "search.started"), updated=_read_time(raw.get("updated"), "search.updated"),
    )


def _read_time(raw: Any, where: str) -> float:
    _require(isinstance(raw, str), f"{where} is not an ISO 8601 time")
    try:
        return parse_iso_time(raw)
    except ValueError:
        raise _Bad(f"{where} {raw!r} is not an ISO 8601 time") from None


def _require(condition: Any, problem: str) -> None:
    if not condition:
        raise _Bad(problem)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _is_time(v: Any) -> bool:
    return _is_number(v) and v >= 0


def _is_scalar(v: Any) -> bool:
    return isinstance(v, (bool, str)) or _is_number(v)


def _is_plain(v: Any) -> bool:
    """A scalar, or a short list of scalars (a per-axis stride, say)."""
    return _is_scalar(v) or (isinstance(v, list) and len(v) <= 16 and all(_is_scalar(x) for x in v))
