"""Search spaces: parameters, their values, and the constraints between them. Pure: no GPU, no I/O, no randomness.

A configuration is a plain `dict[str, int | str]` keyed by parameter name. `config_key` gives its canonical text
(the cache's key and the replay's identity). Strategies see a space as an ordered list of valid candidates plus
the parameter descriptions they need for encoding.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable, Iterable, Iterator, Literal, Mapping, Sequence

Value = int | float | str | bool
Config = dict[str, Value]


@dataclass(frozen=True)
class Param:
    """One tunable parameter. `ordinal` values have a meaningful order (tile sizes); `categorical` ones do not."""

    name: str
    values: tuple[Value, ...]
    kind: Literal["ordinal", "categorical"] = "ordinal"
    doc: str = ""
    default: Value | None = None  # what a configuration lacking it means (one stored before the parameter existed)

    def __post_init__(self) -> None:
        if not self.values:
            raise ValueError(f"parameter {self.name} has no values")
        if len(set(self.values)) != len(self.values):
            raise ValueError(f"parameter {self.name} repeats a value")


def _find(params: Sequence[Param], name: str) -> Param:
    for p in params:
        if p.name == name:
            return p
    raise KeyError(name)


# A rule returns None when the configuration is fine, else the reason it is not.
Rule = Callable[[Mapping[str, Value]], "str | None"]


@dataclass(frozen=True)
class SearchSpace:
    """Parameters and the rules that reject combinations (shape alignment, device limits, between parameters)."""

    params: tuple[Param, ...]
    rules: tuple[Rule, ...] = field(default=())

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    def param(self, name: str) -> Param:
        return _find(self.params, name)

    @cached_property
    def _defaults(self) -> dict[str, Value]:
        return {p.name: p.default for p in self.params if p.default is not None}

    def complete(self, config: Mapping[str, Value]) -> Mapping[str, Value]:
        """`config` with each parameter it lacks that has a default set to that default."""
        if all(name in config for name in self._defaults):
            return config
        return {**config, **{name: value for name, value in self._defaults.items() if name not in config}}

    def why_invalid(self, config: Mapping[str, Value]) -> str | None:
        """None if `config` (completed with the defaults of parameters it lacks) is in the space and passes every
        rule, else a sentence saying why not."""
        config = self.complete(config)
        for p in self.params:
            if p.name not in config:
                return f"parameter {p.name} is missing"
            if config[p.name] not in p.values:
                return f"{p.name}={config[p.name]!r} is not one of {list(p.values)}"
        extra = set(config) - set(self.names)
        if extra:
            return f"unknown parameter(s) {sorted(extra)}"
        for rule in self.rules:
            reason = rule(config)
            if reason:
                return reason
        return None

    def all_configs(self) -> Iterator[Config]:
        for combo in itertools.product(*(p.values for p in self.params)):
            yield dict(zip(self.names, combo))

    def valid_configs(self) -> list[Config]:
        # every combination is complete and in range: only the rules can reject it
        return [c for c in self.all_configs() if not any(rule(c) for rule in self.rules)]

    def rejections(self) -> Iterator[tuple[Config, str]]:
        for c in self.all_configs():
            reason = self.why_invalid(c)
            if reason:
                yield c, reason


def config_key(config: Mapping[str, Value]) -> str:
    """Canonical text of a configuration: JSON with sorted keys and no spaces."""
    return json.dumps(dict(config), sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class Candidates:
    """What a search strategy sees: valid configurations in a fixed order, and the parameters that describe them."""

    params: tuple[Param, ...]
    configs: tuple[Mapping[str, Value], ...]

    @classmethod
    def from_space(cls, space: SearchSpace) -> "Candidates":
        return cls(params=space.params, configs=tuple(space.valid_configs()))

    @classmethod
    def from_configs(cls, params: Sequence[Param], configs: Iterable[Mapping[str, Value]]) -> "Candidates":
        return cls(params=tuple(params), configs=tuple(configs))

    def __len__(self) -> int:
        return len(self.configs)

    def index_of(self) -> dict[str, int]:
        return {config_key(c): i for i, c in enumerate(self.configs)}


def _merge_values(parts: Sequence[Param], missing: bool) -> tuple[Value, ...]:
    values: list = []
    for p in parts:
        values += [v for v in p.values if v not in values]
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        values.sort()
    return ((None,) if missing else ()) + tuple(values)  # None: the parameter does not apply to that family


@dataclass(frozen=True)
class UnionSpace:
    """Several kernel families' spaces as one search space.

    A configuration belongs to the part whose `discriminator` parameter (the kernel family) lists its value, and
    keeps only that part's parameters. `params` merges the parts' parameters by name, so that strategies can encode
    every candidate in one coordinate system; a parameter some family lacks gets the value None in front.
    """

    parts: tuple[SearchSpace, ...]
    discriminator: str = "family"

    @property
    def params(self) -> tuple[Param, ...]:
        names: list[str] = []
        for part in self.parts:
            names += [n for n in part.names if n not in names]
        merged = []
        for name in names:
            having = [part.param(name) for part in self.parts if name in part.names]
            kind = "ordinal" if all(p.kind == "ordinal" for p in having) else "categorical"
            merged.append(Param(name, _merge_values(having, missing=len(having) < len(self.parts)), kind, having[0].doc))
        return tuple(merged)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    def param(self, name: str) -> Param:
        return _find(self.params, name)

    def part_for(self, config: Mapping[str, Value]) -> SearchSpace | None:
        for part in self.parts:
            if config.get(self.discriminator) in part.param(self.discriminator).values:
                return part
        return None

    def complete(self, config: Mapping[str, Value]) -> Mapping[str, Value]:
        """`config` completed by its family's part (SearchSpace.complete); as it is where no part takes it."""
        part = self.part_for(config)
        return config if part is None else part.complete(config)

    def why_invalid(self, config: Mapping[str, Value]) -> str | None:
        part = self.part_for(config)
        if part is None:
            families = [v for part in self.parts for v in part.param(self.discriminator).values]
            return f"{self.discriminator}={config.get(self.discriminator)!r} is not one of {families}"
        return part.why_invalid(config)

    def all_configs(self) -> Iterator[Config]:
        for part in self.parts:
            yield from part.all_configs()

    def valid_configs(self) -> list[Config]:
        return [c for part in self.parts for c in part.valid_configs()]

    def rejections(self) -> Iterator[tuple[Config, str]]:
        for part in self.parts:
            yield from part.rejections()
