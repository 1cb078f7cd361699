"""What the tuning cache stores: keys, trials, search state, and the reports its maintenance returns. Data only."""

from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

from tracea_cli.space import Value, config_key

#: Version of what a key identifies. Bump it when a measurement stops being comparable with older ones (a change
#: in the timing method, say): keys of another version are never hit again and `prune` removes them. This is not
#: the file's table layout, which is `db.SCHEMA_VERSION` and is migrated in place.
KEY_SCHEMA_VERSION = 1

#: Statuses a trial may have (the values of `backends.base.Status`).
STATUSES = ("ok", "invalid", "compile_error", "launch_error", "wrong_result", "timeout", "crashed")

SHORT_ID_LENGTH = 12


def _pairs(mapping: Mapping[str, Any] | tuple) -> tuple[tuple[str, Any], ...]:
    items = mapping.items() if isinstance(mapping, Mapping) else mapping
    return tuple((str(k), v) for k, v in items)


def _plain(value: Any) -> Any:
    """A problem key's value as canonical plain data (mappings sorted, sequences as tuples)."""
    if isinstance(value, Mapping):
        return tuple((str(k), _plain(v)) for k, v in sorted(value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_plain(v) for v in value)
    return value


def _unplain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


@dataclass(frozen=True)
class CacheKey:
    """Everything that decides whether a stored result applies to a tuning request.

    `problem` is the op's own key (ops/base.Problem.key(): labelled plain values, sizes included; kept sorted by
    name) and `sizes` its named sizes (Problem.sizes(), in the op's order: warm starts measure distances in them);
    both may be given as dicts and are kept as tuples of pairs so that keys are hashable. `device_class` says what makes two devices
    interchangeable (name, compute capability, SM count, memory, clocks), never a device's UUID, so results carry over
    between identical GPUs and between machines. `arch` is the CUDA architecture the kernels were built for ("sm_90"),
    None on the CPU. The cache knows no op: it stores and compares these values as given.
    """

    op: str
    backend: str
    dtype: str
    problem: tuple[tuple[str, Any], ...]
    sizes: tuple[tuple[str, int], ...]
    device_class: str
    source_hash: str
    toolchain: tuple[tuple[str, str], ...] = ()
    arch: str | None = None
    schema_version: int = KEY_SCHEMA_VERSION

    def __post_init__(self) -> None:
        object.__setattr__(self, "problem", tuple(sorted((k, _plain(v)) for k, v in _pairs(self.problem))))
        object.__setattr__(self, "sizes", tuple((k, int(v)) for k, v in _pairs(self.sizes)))
        object.__setattr__(self, "toolchain", tuple((k, str(v)) for k, v in _pairs(self.toolchain)))
        if not self.sizes or any(v <= 0 for _, v in self.sizes):
            raise ValueError(f"a cache key needs sizes that are positive, got {self.sizes_dict}")

    @property
    def problem_dict(self) -> dict[str, Any]:
        return {k: _unplain(v) for k, v in self.problem}

    @property
    def sizes_dict(self) -> dict[str, int]:
        return dict(self.sizes)

    @property
    def toolchain_dict(self) -> dict[str, str]:
        return dict(self.toolchain)

    @property
    def shape_text(self) -> str:
        """'2048x2048x2048': the sizes in the order the op names them."""
        return "x".join(str(v) for _, v in self.sizes)

    @property
    def variant(self) -> dict[str, Any]:
        """The problem's fields that are not sizes (a layout, an epilogue): keys that share them warm-start each other."""
        sizes = self.sizes_dict
        return {k: v for k, v in self.problem_dict.items() if k not in sizes}

    @property
    def bucket(self) -> dict[str, int]:
        """log2 of each size, rounded: sizes in one bucket are close enough to warm-start each other."""
        return {k: int(round(math.log2(v))) for k, v in self.sizes}

    def identity(self) -> dict[str, Any]:
        """The labelled fields the id is made from (None-valued optional fields left out, so adding one keeps ids)."""
        d: dict[str, Any] = {
            "op": self.op,
            "backend": self.backend,
            "dtype": self.dtype,
            "problem": dict(sorted(self.problem_dict.items())),
            "device_class": self.device_class,
            "source_hash": self.source_hash,
            "toolchain": dict(sorted(self.toolchain)),
            "schema_version": self.schema_version,
        }
        if self.arch is not None:
            d["arch"] = self.arch
        return d

    @property
    def digest(self) -> str:
        """SHA-256 (hex) of the canonical JSON of `identity()`: the key's full id in the database."""
        text = json.dumps(self.identity(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    @property
    def id(self) -> str:
        """The short id shown to users (a prefix of `digest`; `TuningCache.resolve` accepts any unique prefix)."""
        return self.digest[:SHORT_ID_LENGTH]

    @property
    def label(self) -> str:
        variant = " ".join(str(v) for v in self.variant.values() if v not in ("none", None))
        return (f"{self.op} {self.shape_text} {self.dtype}{' ' + variant if variant else ''} on {self.backend} "
                f"({self.device_class})")

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready fields, with the short id first (the export format's `key` object)."""
        return {
            "id": self.id,
            "op": self.op,
            "backend": self.backend,
            "dtype": self.dtype,
            "problem": self.problem_dict,
            "sizes": self.sizes_dict,
            "device_class": self.device_class,
            "arch": self.arch,
            "source_hash": self.source_hash,
            "toolchain": self.toolchain_dict,
            "schema_version": self.schema_version,
        }


@dataclass(frozen=True)
class Trial:
    """One configuration tried for one key: its outcome and, when it ran correctly, its raw samples.

    `samples_ms` are per-launch times in milliseconds as the timing harness returned them; `median_ms` and `cv`
    summarise them (None for a failure). `rel_error` is the relative Frobenius error against the float64
    reference (None when the kernel never produced an output). `timestamp` is seconds since the Unix epoch.
    """

    config: Mapping[str, Value]
    status: str = "ok"
    reason: str = ""
    samples_ms: tuple[float, ...] = ()
    median_ms: float | None = None
    cv: float | None = None
    rel_error: float | None = None
    compile_s: float = 0.0
    timestamp: float = field(default_factory=time.time)

    def __post_init__(self) -> None:
        status = getattr(self.status, "value", self.status)  # accepts backends.base.Status
        if status not in STATUSES:
            raise ValueError(f"unknown trial status {status!r}; expected one of {STATUSES}")
        object.__setattr__(self, "status", status)
        object.__setattr__(self, "config", dict(self.config))
        object.__setattr__(self, "samples_ms", tuple(float(s) for s in self.samples_ms))

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def config_key(self) -> str:
        return config_key(self.config)

    @classmethod
    def from_evaluation(cls, config: Mapping[str, Value], evaluation: Any, *, timestamp: float | None = None) -> "Trial":
        """A trial from a backend's `Evaluation`: median and noise computed from its raw samples when it ran."""
        from tracea_cli.stats import summarize

        samples = tuple(evaluation.samples.times_ms) if evaluation.samples is not None else ()
        summary = summarize(samples) if samples else None
        return cls(
            config=config,
            status=evaluation.status,
            reason=evaluation.reason,
            samples_ms=samples,
            median_ms=summary.median if summary else None,
            cv=summary.cv if summary else None,
            rel_error=evaluation.rel_error,
            compile_s=evaluation.compile_s,
            timestamp=time.time() if timestamp is None else timestamp,
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "config": dict(self.config),
            "status": self.status,
            "reason": self.reason,
            "samples_ms": [s for s in self.samples_ms if math.isfinite(s)],
            "median_ms": _finite(self.median_ms),
            "cv": _finite(self.cv),
            "rel_error": _finite(self.rel_error),  # NaN (a wrong result's error) is written as null
            "compile_s": self.compile_s,
            "timestamp": iso_time(self.timestamp),
        }


@dataclass(frozen=True)
class SearchState:
    """How much searching a key has had: evaluations spent (all runs together), the budget last asked for,
    whether the search converged, the strategy, and when it started and was last updated (Unix seconds)."""

    strategy: str
    budget: int
    evaluations: int
    converged: bool
    started: float
    updated: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "strategy": self.strategy,
            "budget": self.budget,
            "evaluations": self.evaluations,
            "converged": self.converged,
            "started": iso_time(self.started),
            "updated": iso_time(self.updated),
        }


@dataclass(frozen=True)
class KeySummary:
    """One line of `tracea cache ls`."""

    key: CacheKey
    trials: int
    failed: int
    winner_ms: float | None
    updated: float

    def as_dict(self) -> dict[str, Any]:
        return {
            **self.key.as_dict(),
            "trials": self.trials,
            "failed": self.failed,
            "winner_ms": self.winner_ms,
            "updated": iso_time(self.updated),
        }


@dataclass(frozen=True)
class ImportReport:
    """What an import changed. Trials already present (same configuration, time and measurement) are skipped."""

    entries: int
    keys_added: int
    keys_merged: int
    trials_added: int
    trials_skipped: int
    winners_set: int

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class PruneReport:
    """What a prune removed (or would remove, on a dry run)."""

    keys_removed: int
    trials_removed: int
    dry_run: bool = False

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def iso_time(seconds: float) -> str:
    """Unix seconds as ISO 8601 in UTC with a 'Z' ('2026-11-29T18:45:00.123456Z')."""
    import datetime as _dt

    return _dt.datetime.fromtimestamp(seconds, _dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_iso_time(text: str) -> float:
    """The inverse of `iso_time` (any ISO 8601 text with a zone; a missing zone is read as UTC). Raises ValueError."""
    import datetime as _dt

    t = _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    if t.tzinfo is None:
        t = t.replace(tzinfo=_dt.timezone.utc)
    return t.timestamp()
