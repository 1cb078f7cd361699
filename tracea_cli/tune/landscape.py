"""Recorded tuning landscapes: every configuration of a space with its measured time or its failure, read from a file.

A landscape lets a search strategy be scored without hardware ("replay"). Two sources:

- Kernel Tuner cache files (JSON; written by a brute-force run): `tune_params_keys`, `tune_params`, and `cache`,
  a map from the comma-joined parameter values to a record whose `time` is milliseconds or an error marker string
  ("CompilationFailedConfig", "RuntimeFailedConfig", ...). The space is exactly the set of recorded keys.
- Tracea's own cache exports (docs/cache-format.md): `load_tracea_export`, kept separate so that it follows that
  format as it is settled.

Loading validates the file and raises `UsageError` naming the path; it never returns half a landscape.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from tracea_cli.errors import UsageError
from tracea_cli.space import Candidates, Param, Value


@dataclass(frozen=True)
class Landscape:
    """A fully measured space: `configs[i]` took `times[i]` (in `unit`), or failed (`times[i]` is inf, `failures[i]`
    the recorded marker). Failed configurations are part of the space: evaluating one costs an evaluation."""

    source: str  # the file it came from
    kernel: str
    device: str
    unit: str
    params: tuple[Param, ...]
    configs: tuple[Mapping[str, Value], ...]
    times: tuple[float, ...]
    failures: tuple[str | None, ...]

    def __len__(self) -> int:
        return len(self.configs)

    @property
    def candidates(self) -> Candidates:
        return Candidates(params=self.params, configs=self.configs)

    @property
    def optimum(self) -> float:
        """The smallest recorded time (inf when every configuration failed)."""
        return min(self.times)

    @property
    def failed(self) -> int:
        return sum(1 for f in self.failures if f is not None)


MAX_FILE_BYTES = 256 * 2**20  # a landscape file, compressed or not, and its decompressed text: at most 256 MiB
_GZIP_MAGIC = b"\x1f\x8b"


def load_landscape(path: Path) -> Landscape:
    """Read a recorded landscape (Kernel Tuner cache file or Tracea cache export) from `path`.

    The file may be gzip-compressed (told by its first two bytes, whatever its name); it is decompressed in memory.
    Files, and decompressed contents, over `MAX_FILE_BYTES` are refused, and so is JSON nested too deeply to parse.
    """
    path = Path(path)
    data = _parse_json(_read_text(path), path)
    if isinstance(data, dict) and "cache" in data and "tune_params_keys" in data:
        return load_kernel_tuner(data, source=str(path))
    if isinstance(data, dict) and str(data.get("format", "")).startswith("tracea"):
        return load_tracea_export(data, source=str(path))
    raise UsageError(
        f"the landscape file {path} is neither a Kernel Tuner cache file nor a Tracea cache export.",
        "A Kernel Tuner cache file has `tune_params_keys`, `tune_params` and `cache` at its top level.",
    )


def _read_text(path: Path) -> str:
    """The file's text, gunzipped if it is gzip-compressed; bounded by MAX_FILE_BYTES before and after."""
    import zlib

    limit = f"{MAX_FILE_BYTES // 2**20} MiB" if MAX_FILE_BYTES >= 2**20 else f"{MAX_FILE_BYTES} bytes"
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise UsageError(f"the landscape file {path} does not exist.", "Give the path of a recorded landscape (JSON).") from None
    except IsADirectoryError:
        raise UsageError(f"the landscape path {path} is a folder, not a file.", "Give the path of a JSON file.") from None
    except OSError as e:
        why = e.strerror or type(e).__name__
        raise UsageError(f"cannot read the landscape file {path} ({why}).", "Check the path and its permissions.") from None
    if len(raw) > MAX_FILE_BYTES:
        raise UsageError(f"the landscape file {path} is larger than {limit}, more than any recorded landscape needs.",
                         "Give a smaller file (a Kernel Tuner cache file without its per-run `times` is a tenth the size).")
    if raw[:2] == _GZIP_MAGIC:
        # One member after another, as gzip writes them; never more than the limit of output (a zip bomb stops here).
        out, pending = bytearray(), raw
        try:
            while pending:
                unzip = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
                out += unzip.decompress(pending, MAX_FILE_BYTES + 1 - len(out))
                if len(out) > MAX_FILE_BYTES or unzip.unconsumed_tail:
                    raise UsageError(f"the landscape file {path} decompresses to more than {limit}, more than any "
                                     "recorded landscape needs.", "Give a smaller landscape.")
                if not unzip.eof:
                    raise UsageError(f"the landscape file {path} is a truncated gzip file.", "Copy it again in full.")
                pending = unzip.unused_data.lstrip(b"\0")
        except zlib.error:
            raise UsageError(f"the landscape file {path} starts like a gzip file but is not a valid one.",
                             "Give a JSON file, or one compressed with gzip.") from None
        raw = bytes(out)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"cannot read the landscape file {path} (it is not UTF-8 text).",
                         "Give a JSON file, or one compressed with gzip.") from None


def _parse_json(text: str, path: Path) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise UsageError(
            f"the landscape file {path} is not valid JSON (line {e.lineno}, column {e.colno}).",
            "Give a Kernel Tuner cache file or a Tracea cache export.",
        ) from None
    except RecursionError:
        # Python's parser recurses once per level; a landscape is four levels deep (file, cache, record, samples).
        raise UsageError(f"the landscape file {path} nests its JSON too deeply to be a landscape.",
                         "Give a Kernel Tuner cache file or a Tracea cache export.") from None


def load_kernel_tuner(data: Mapping[str, Any], *, source: str) -> Landscape:
    """Build a landscape from a parsed Kernel Tuner cache file (objective: time, lower is better)."""

    def bad(what: str) -> UsageError:
        return UsageError(f"the landscape file {source} is not a usable Kernel Tuner cache file: {what}.",
                          "Give a cache file written by Kernel Tuner's brute-force strategy.")

    keys = data.get("tune_params_keys")
    values = data.get("tune_params")
    cache = data.get("cache")
    if not isinstance(keys, list) or not keys or not all(isinstance(k, str) for k in keys):
        raise bad("`tune_params_keys` is not a list of parameter names")
    if not isinstance(values, dict) or any(not isinstance(values.get(k), list) or not values.get(k) for k in keys):
        raise bad("`tune_params` does not list values for every parameter")
    if not isinstance(cache, dict) or not cache:
        raise bad("`cache` holds no configurations")
    objective = data.get("objective", "time")
    if objective != "time":
        raise bad(f"its objective is {objective!r}; only `time` (lower is better) is supported")

    try:
        params = tuple(_param(name, values[name]) for name in keys)
    except (TypeError, ValueError) as e:
        raise bad(str(e)) from None

    configs: list[dict[str, Value]] = []
    times: list[float] = []
    failures: list[str | None] = []
    seen: set[tuple] = set()
    for key, record in cache.items():
        if not isinstance(record, dict):
            raise bad(f"the record for {key!r} is not an object")
        config = _config_from_record(key, record, params)
        if config is None:
            raise bad(f"the record for {key!r} does not match `tune_params`")
        identity = tuple(config[p.name] for p in params)
        if identity in seen:
            raise bad(f"the configuration {key!r} appears twice")
        seen.add(identity)
        time, failure = _time_of(record.get("time"))
        configs.append(config)
        times.append(time)
        failures.append(failure)
    return Landscape(
        source=source,
        kernel=str(data.get("kernel_name", "")),
        device=str(data.get("device_name", "")),
        unit="ms",  # Kernel Tuner records times in milliseconds
        params=params,
        configs=tuple(configs),
        times=tuple(times),
        failures=tuple(failures),
    )


TRACEA_EXPORT_VERSION = 1  # the newest export format this reader knows (docs/cache-format.md)


def load_tracea_export(data: Mapping[str, Any], *, source: str) -> Landscape:
    """Build a landscape from a Tracea cache export (docs/cache-format.md, "Reading it as a landscape").

    One entry (cache key) is one landscape; a file with several is read at the entry with the most distinct
    configurations, and the landscape's `source` names its key. Per distinct configuration: the best `median_ms`
    of its `ok` trials, else a failure marked with the status of its last trial. The parameters and their values
    are the union over the configurations (numbers ordinal, anything else categorical).
    """

    def bad(what: str) -> UsageError:
        return UsageError(f"the landscape file {source} is not a usable Tracea cache export: {what}.",
                          "Give a file written by `tracea cache export`.")

    version = data.get("format_version")
    if data.get("format") != "tracea-cache-export" or not isinstance(version, int) or isinstance(version, bool):
        raise bad("`format` is not \"tracea-cache-export\" with an integer `format_version`")
    if version > TRACEA_EXPORT_VERSION:
        raise UsageError(
            f"the landscape file {source} is a Tracea cache export of format version {version}, newer than this "
            f"Tracea reads ({TRACEA_EXPORT_VERSION}).",
            "Upgrade Tracea, or export the cache with the version that reads it.",
        )
    entries = data.get("entries")
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise bad("`entries` is not a list of objects")

    landscapes = [_entry_landscape(e, position, source, bad) for position, e in enumerate(entries)]
    landscapes = [land for land in landscapes if len(land)]
    if not landscapes:
        raise bad("no entry holds any trials")
    return max(landscapes, key=len)


def _entry_landscape(entry: Mapping[str, Any], position: int, source: str, bad) -> Landscape:
    key = entry.get("key") if isinstance(entry.get("key"), dict) else {}
    name = f"entry {position + 1}" + (f" (key {key['id']})" if isinstance(key.get("id"), str) else "")
    trials = entry.get("trials", [])
    if not isinstance(trials, list):
        raise bad(f"the trials of {name} are not a list")

    best: dict[tuple, float] = {}  # identity -> best ok median
    marker: dict[tuple, str] = {}  # identity -> status of the last failed trial
    configs: dict[tuple, dict[str, Value]] = {}
    names: tuple[str, ...] | None = None
    for trial in trials:
        config = trial.get("config") if isinstance(trial, dict) else None
        if not isinstance(config, dict) or not config:
            raise bad(f"a trial of {name} has no `config` object")
        if names is None:
            names = tuple(sorted(config))
        if tuple(sorted(config)) != names:
            raise bad(f"the trials of {name} do not all have the same parameters")
        for k, v in config.items():
            if not isinstance(v, (int, float, str, bool)) or (isinstance(v, float) and not math.isfinite(v)):
                raise bad(f"a trial of {name} sets {k} to {v!r}, not a number or a text")
        identity = tuple((k, type(config[k]).__name__, config[k]) for k in names)
        configs.setdefault(identity, dict(config))
        status = trial.get("status")
        if status == "ok":
            median = trial.get("median_ms")
            if isinstance(median, bool) or not isinstance(median, (int, float)) or not math.isfinite(median) or median <= 0:
                raise bad(f"an ok trial of {name} has no positive `median_ms`")
            best[identity] = min(best.get(identity, math.inf), float(median))
        elif isinstance(status, str) and status:
            marker[identity] = status
        else:
            raise bad(f"a trial of {name} has no `status`")

    values: dict[str, dict[tuple, Value]] = {n: {} for n in names or ()}
    for config in configs.values():
        for k, v in config.items():
            values[k].setdefault((type(v).__name__, v), v)
    try:
        params = tuple(_param(k, list(vs.values())) for k, vs in values.items())
    except ValueError as e:
        raise bad(f"in {name}, {e}") from None
    identities = list(configs)
    return Landscape(
        source=f"{source} ({name})" if key else source,
        kernel=str(key.get("op", "")),
        device=str(key.get("device_class", "")),
        unit="ms",
        params=params,
        configs=tuple(configs[i] for i in identities),
        times=tuple(best.get(i, math.inf) for i in identities),
        failures=tuple(None if i in best else marker[i] for i in identities),
    )


def _param(name: str, values: Sequence[Any]) -> Param:
    """Numeric values are ordinal (a tile size, a block size); anything else is categorical."""
    for v in values:
        if not isinstance(v, (int, float, str, bool)) or (isinstance(v, float) and not math.isfinite(v)):
            raise ValueError(f"parameter {name} has a value {v!r} that is not a number or a string")
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
    if numeric:
        return Param(name=name, values=tuple(sorted(values)), kind="ordinal")
    return Param(name=name, values=tuple(values), kind="categorical")


def _config_from_record(key: str, record: Mapping[str, Any], params: Sequence[Param]) -> dict[str, Value] | None:
    """The configuration a record describes: its own fields, or else its key's comma-joined values."""
    if all(p.name in record for p in params):
        raw = [record[p.name] for p in params]
    else:
        raw = key.split(",")
        if len(raw) != len(params):
            return None
    config: dict[str, Value] = {}
    for p, r in zip(params, raw):
        value = _match(r, p.values)
        if value is None:
            return None
        config[p.name] = value
    return config


def _match(raw: Any, allowed: Sequence[Value]) -> Value | None:
    """`raw` as one of the allowed values (records and keys may spell 8 as 8, 8.0 or "8")."""
    for v in allowed:
        if raw == v and type(raw) is not bool or raw is v:
            return v
    text = str(raw).strip()
    for v in allowed:
        if text == str(v):
            return v
    try:
        number = float(text)
    except ValueError:
        return None
    for v in allowed:
        if isinstance(v, (int, float)) and not isinstance(v, bool) and float(v) == number:
            return v
    return None


def _time_of(raw: Any) -> tuple[float, str | None]:
    """(time, None) for a measurement; (inf, marker) for a recorded failure."""
    if isinstance(raw, bool) or raw is None:
        return math.inf, "no time recorded"
    if isinstance(raw, (int, float)):
        if math.isfinite(raw) and raw > 0:
            return float(raw), None
        return math.inf, f"unusable time {raw!r}"
    if isinstance(raw, str):
        return math.inf, raw
    return math.inf, "no time recorded"


# -- Synthetic landscapes (for tests and for checking that a strategy generalises) -----------------------------------


def synthetic_landscape(seed: int, *, small: bool = False) -> Landscape:
    """A random kernel-like space, drawn from `seed`, with a known optimum, failures and an invalid region.

    Ordinal parameters are powers of two (block sizes) or short linear ranges (tile sizes); categorical ones are
    named variants. log(time) is a bowl around a random centre with per-parameter weights, one interaction between
    two parameters, an offset per categorical value, a divisibility penalty on one parameter and 3% measurement
    noise. Combinations whose first two parameters are both large are not in the space ("too many threads");
    those that are heavy in two others fail ("too much shared memory"). `small` keeps it to a few hundred
    configurations for fast tests.
    """
    rng = np.random.default_rng(seed)
    n_ordinal = int(rng.integers(2, 4 if small else 5))
    n_categorical = int(rng.integers(1, 3))
    params: list[Param] = []
    for j in range(n_ordinal):
        top = int(rng.integers(3, 5 if small else 8))
        if rng.random() < 0.5:
            values = tuple(2**k for k in range(top))
        else:
            values = tuple(range(1, top + 1))
        params.append(Param(f"p{j}", values))
    for j in range(n_categorical):
        count = int(rng.integers(2, 4))
        params.append(Param(f"c{j}", tuple(f"v{k}" for k in range(count)), kind="categorical"))

    centre = rng.uniform(0.2, 1.0, n_ordinal)
    weight = rng.uniform(0.5, 3.0, n_ordinal)
    twist = rng.uniform(-1.5, 1.5)
    offsets = [np.concatenate([[0.0], rng.uniform(0.05, 0.7, len(p.values) - 1)]) for p in params[n_ordinal:]]
    for o in offsets:
        rng.shuffle(o)
    period = int(rng.integers(2, 4))

    configs: list[dict[str, Value]] = []
    times: list[float] = []
    failures: list[str | None] = []
    for ranks in itertools.product(*(range(len(p.values)) for p in params)):
        u = np.array([r / max(1, len(params[j].values) - 1) for j, r in enumerate(ranks[:n_ordinal])])
        if u[0] + u[1] > 1.6:
            continue  # invalid: not part of the space
        config = {p.name: p.values[r] for p, r in zip(params, ranks)}
        log_time = float(weight @ (u - centre) ** 2 + twist * (u[0] - centre[0]) * (u[1] - centre[1]))
        log_time += sum(float(o[r]) for o, r in zip(offsets, ranks[n_ordinal:]))
        log_time += 0.15 * (int(config["p1"]) % period != 0)
        log_time += 0.03 * float(rng.standard_normal())
        heavy = u[-1] + 0.5 * u[-2] + 0.3 * (ranks[n_ordinal] == len(params[n_ordinal].values) - 1)
        configs.append(config)
        if heavy > 1.3:
            times.append(math.inf)
            failures.append("CompilationFailedConfig")
        else:
            times.append(float(np.exp(log_time)))
            failures.append(None)
    return Landscape(
        source=f"synthetic:{seed}{':small' if small else ''}",
        kernel="synthetic",
        device="none",
        unit="ms",
        params=tuple(params),
        configs=tuple(configs),
        times=tuple(times),
        failures=tuple(failures),
    )
