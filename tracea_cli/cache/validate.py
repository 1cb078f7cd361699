"""Checking imported configurations against the op's search space (what `tracea cache import` passes to `import_`).

For a CUDA key whose architecture is known (`key.arch`, or an `sm_NN` in the device class) the whole space is
checked, rules and device limits included (limits from `backends.archs`). When the architecture is unknown, the
limits cannot be checked: only the parameter names and values are. CPU keys are checked against the whole space.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Callable, Mapping

from tracea_cli.cache.records import CacheKey
from tracea_cli.errors import TraceaError
from tracea_cli.space import SearchSpace, UnionSpace, Value

Validator = Callable[[CacheKey, Mapping[str, Value]], "str | None"]

_ARCH_IN_TEXT = re.compile(r"\bsm_?(\d{2,3}a?)\b", re.IGNORECASE)


def arch_of_key(key: CacheKey) -> str | None:
    """The key's CUDA architecture when this Tracea knows its limits, else None."""
    from tracea_cli.target import ARCH_LIMITS

    candidates = [key.arch] if key.arch else []
    candidates += [f"sm_{m.lower()}" for m in _ARCH_IN_TEXT.findall(key.device_class)]
    for arch in candidates:
        if arch in ARCH_LIMITS:
            return arch
    return None


def gemm_validator() -> Validator:
    """A validator for GEMM keys: None when the configuration is in the key's search space, else the reason."""
    spaces: dict[str, tuple[SearchSpace, bool] | str] = {}

    def validate(key: CacheKey, config: Mapping[str, Value]) -> str | None:
        if key.digest not in spaces:
            spaces[key.digest] = _space_for_key(key)
        found = spaces[key.digest]
        if isinstance(found, str):
            return found
        space, full = found
        if not full:  # unknown architecture: names and values only
            space = _without_rules(space)
        return space.why_invalid(config)

    return validate


def _without_rules(space: SearchSpace | UnionSpace) -> SearchSpace | UnionSpace:
    """The same space (its class, each family's part) with no rules: parameter names and values are still checked,
    and a space's own handling of configurations (defaults of later-added parameters) is kept."""
    if isinstance(space, UnionSpace):
        return replace(space, parts=tuple(replace(part, rules=()) for part in space.parts))
    return replace(space, rules=())


def _space_for_key(key: CacheKey) -> tuple[SearchSpace, bool] | str:
    """(space, whether its limits apply) or the reason no space can be built for this key."""
    from tracea_cli import target as archs
    from tracea_cli.ops.gemm.problem import GemmProblem
    from tracea_cli.ops.gemm.spaces import space_for
    from tracea_cli.target import Target

    if key.op != "gemm":
        return f"this Tracea has no search space for the operation {key.op!r}"
    shape = key.shape_dict
    if sorted(shape) != ["k", "m", "n"]:
        return f"a gemm shape has sizes m, n and k, not {sorted(shape)}"
    try:
        problem = GemmProblem(m=shape["m"], n=shape["n"], k=shape["k"], dtype=key.dtype, layout=key.layout, epilogue=key.epilogue)
        if key.backend == "cuda":
            arch = arch_of_key(key)
            # Without a known architecture, build the space for the roomiest one and check names and values only.
            stand_in = arch or max(archs.ARCH_LIMITS, key=lambda a: archs.ARCH_LIMITS[a].max_shared_per_block_optin)
            target = Target(backend="cuda", device_class=key.device_class, arch=stand_in, limits=archs.limits_for(stand_in))
            return space_for(problem, target), arch is not None
        target = Target(backend=key.backend, device_class=key.device_class)
        return space_for(problem, target), True
    except TraceaError as e:
        return e.message.rstrip(".")
    except ModuleNotFoundError as e:
        return f"the {key.backend} gemm search space is not available in this installation ({e.name} is missing)"
