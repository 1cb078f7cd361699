"""Which configuration each (shape, architecture) of an export gets, and what is known about it.

Three sources: the tuning cache's winners (`--config` left out), the shipped defaults (`--config default`, kept in
profiles/defaults/OP.json) and a JSON file (`--config FILE`). Every configuration is checked against the search
space of its problem on the target architecture (`space_of`) before anything is compiled; one outside it is a usage
error naming the reason. A configuration counts as verified on an architecture only where a correctness check on a
device of that architecture is on record; everywhere else it is `compiled-only`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from tracea_cli.errors import UsageError
from tracea_cli.export.manifest import (
    COMPILED_ONLY,
    VERIFIED,
    Measurement,
    Verification,
)
from tracea_cli.files import read_json
from tracea_cli.ops.base import problem_fields
from tracea_cli.ops.dtypes import get_dtype
from tracea_cli.ops.shipped import NameIn, defaults_path, first_valid
from tracea_cli.space import Value, config_key
from tracea_cli.target import base_arch

# (problem, arch) -> a configuration's verdict in that problem's space on that architecture (None: valid)
SpaceOf = Callable[[Any, str], Callable[[Mapping[str, Value]], "str | None"]]


@dataclass(frozen=True)
class Choice:
    """The configuration exported for one problem on one architecture, where it came from, and its record."""

    problem: Any
    arch: str
    config: Mapping[str, Value]
    origin: str  # "cache" | "default" | "file"
    origin_detail: str
    verification: Verification
    measurement: Measurement | None = None


def iso_date(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def tune_command(problem: Any) -> str:
    """The `tracea tune` command line that tunes `problem` on a GPU."""
    from tracea_cli.ops.registry import get_op

    declared = {o.name: o for o in get_op(problem.op).options}
    fields = problem_fields(problem)
    options = " ".join(declared[name].argument(value) if name in declared else f"--{name.replace('_', '-')} {value}"
                       for name, value in fields.items() if name != "op")
    return f"tracea tune {problem.op} {options} --backend cuda"


def _compiled_only(evidence: str) -> Verification:
    return Verification(COMPILED_ONLY, evidence=evidence)


# ---- --config FILE ----------------------------------------------------------------------------------------------------

def read_config_file(path: Path) -> dict[str, Value]:
    """A configuration from JSON: the object itself, or an object holding it under "config" (as `tracea tune --json`'s
    winner and `tracea cache show --json` print it)."""
    data = read_json(Path(path), "configuration file", "Give a JSON object of parameter values.")
    if isinstance(data, dict) and isinstance(data.get("winner"), dict) and "config" in data["winner"]:
        data = data["winner"]
    if isinstance(data, dict) and isinstance(data.get("config"), dict):
        data = data["config"]
    if not isinstance(data, dict) or not data or not all(
            isinstance(v, (int, float, str, bool)) for v in data.values()):
        raise UsageError(f"the configuration file {path} does not hold a configuration (a JSON object of parameter values).",
                         "See docs/export.md for an example.")
    return dict(data)


def from_file(path: Path, problems: Sequence[Any], archs: Sequence[str], space_of: SpaceOf) -> list[Choice]:
    config = read_config_file(path)
    choices = []
    for problem in problems:
        for arch in archs:
            reason = space_of(problem, arch)(config)
            if reason:
                raise UsageError(f"the configuration in {path} is outside the search space of {problem.label} on {arch}: "
                                 f"{reason}.", "Fix the file, or export a tuned or default configuration instead.")
            choices.append(Choice(problem, arch, config, "file", str(path),
                                  _compiled_only(f"configuration file {path}: no correctness check on record")))
    return choices


# ---- --config default -------------------------------------------------------------------------------------------------

def from_defaults(problems: Sequence[Any], archs: Sequence[str], space_of: SpaceOf,
                  defaults: Mapping[str, Any] | None = None, name_in: NameIn | None = None) -> list[Choice]:
    """Per problem and architecture the first entry valid there (ops/shipped.first_valid: the architecture's own
    family, then the nearest older ones; an entry read as `name_in` names it in the problem's space), exported so."""
    from tracea_cli.export.defaults import load_defaults

    defaults = defaults if defaults is not None else load_defaults(problems[0].op)
    where = f"profiles/defaults/{defaults_path(problems[0].op).name}"
    choices = []
    for problem in problems:
        for arch in archs:
            pick, reasons = first_valid(defaults, problem, arch, space_of(problem, arch), name_in)
            if pick is None:
                why = f" (the nearest was rejected: {reasons[0]})" if reasons else ""
                raise UsageError(f"no shipped default configuration of {problem.label} is valid on {arch}{why}.",
                                 f"Tune it with `{tune_command(problem)}`, or pass --config FILE.")
            choices.append(Choice(problem, arch, pick.config, "default",
                                  f"{where} {problem.dtype} {pick.family} #{pick.index}",
                                  _default_verification(pick.entry, problem, arch, pick.family, where)))
    return choices


def _default_verification(entry: Mapping[str, Any], problem: Any, arch: str, family: str, where: str) -> Verification:
    record = entry.get("verification", {})
    if record.get("status") == VERIFIED and record.get("arch") == base_arch(arch) and record.get("rel_error") is not None:
        return Verification(VERIFIED, device=record["device"], rel_error=float(record["rel_error"]),
                            bound=get_dtype(problem.dtype).bound, date=record.get("date"),
                            evidence=f"{where}: {record.get('how', 'checked against the float64 reference')}")
    if record.get("status") == VERIFIED:
        return _compiled_only(f"{where}: verified on {record.get('device')} ({record.get('arch')}), never on {arch}")
    return _compiled_only(f"{where} ({family}): {record.get('how', 'compiled only')}")


# ---- the tuning cache ---------------------------------------------------------------------------------------------------

def from_cache(problems: Sequence[Any], archs: Sequence[str], space_of: SpaceOf, cache_path: Path,
               warnings: list[str]) -> list[Choice]:
    """The cached winners: per architecture, the fastest winner tuned on that architecture, else the fastest valid one
    tuned elsewhere (compiled-only)."""
    winners_per_problem = []
    if Path(cache_path).exists():
        from tracea_cli.cache import TuningCache

        with TuningCache.open(cache_path) as cache:
            warnings.extend(cache.warnings)
            cache.on_warning = warnings.append
            for problem in problems:
                winners_per_problem.append(cache.find_winners(problem.op, "cuda", problem.dtype, problem.key()))
    else:
        winners_per_problem = [[] for _ in problems]
    choices = []
    for problem, winners in zip(problems, winners_per_problem):
        winners = [(k, t) for k, t in winners if t.ok and t.config]
        if not winners:
            raise UsageError(f"the tuning cache ({cache_path}) holds no tuned configuration for {problem.label} on cuda.",
                             f"Tune it on a GPU with `{tune_command(problem)}`, "
                             "or export the shipped one with --config default.")
        for arch in archs:
            choices.append(_cached_choice(problem, arch, winners, space_of(problem, arch)))
    return choices


def _cached_choice(problem: Any, arch: str, winners: Sequence[tuple[Any, Any]],
                  why_invalid: Callable[[Mapping[str, Value]], str | None]) -> Choice:
    def tuned_here(key: Any) -> bool:
        return bool(key.arch) and base_arch(key.arch) == base_arch(arch)

    ranked = sorted(winners, key=lambda w: not tuned_here(w[0]))  # stable: fastest first within each group
    reasons = []
    for key, trial in ranked:
        reason = why_invalid(trial.config)
        if reason:
            reasons.append(f"{config_key(trial.config)}: {reason}")
            continue
        detail = f"tuning cache key {key.id} ({key.device_class})"
        if tuned_here(key) and trial.rel_error is not None:
            verification = Verification(VERIFIED, device=key.device_class, rel_error=float(trial.rel_error),
                                        bound=get_dtype(problem.dtype).bound, date=iso_date(trial.timestamp),
                                        evidence=f"tuning cache key {key.id}")
            measurement = None
            if trial.median_ms is not None:
                measurement = Measurement(device=key.device_class, median_ms=float(trial.median_ms),
                                          cv=float(trial.cv or 0.0), n=len(trial.samples_ms), date=iso_date(trial.timestamp))
            return Choice(problem, arch, dict(trial.config), "cache", detail, verification, measurement)
        return Choice(problem, arch, dict(trial.config), "cache", detail,
                      _compiled_only(f"tuned and checked on {key.device_class} ({key.arch}), never run on {arch}"))
    raise UsageError(f"no cached winner of {problem.label} is valid on {arch}: {reasons[0]}.",
                     f"Tune on a GPU of that architecture (`{tune_command(problem)}`), "
                     "or pass --config default.")
