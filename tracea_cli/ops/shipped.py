"""The shipped default configurations of an op (profiles/defaults/OP.json): where they are, which architecture
families a target tries, and the first entry valid for a problem. Export takes that entry for `--config default`
(export/resolve.py); tune evaluates it first (tune/setup.first_configs). Pure but for reading the file.

Per dtype and architecture family (for GEMM: sm_80; sm_86/89; sm_90) an ordered list of configurations; an entry may
say for which problems it is meant (`where`: a problem field -> its allowed values) and carries its verification
record (export/defaults.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from tracea_cli.target import base_arch

WhyInvalid = Callable[[Mapping[str, Any]], "str | None"]
# (problem, configuration) -> the configuration as its family names it in that problem's space
NameIn = Callable[[Any, Mapping[str, Any]], Mapping[str, Any]]


def defaults_path(op: str) -> Path:
    from tracea_cli.resources import profiles_dir

    return profiles_dir() / "defaults" / f"{op}.json"


def read_shipped(op: str) -> dict[str, Any] | None:
    """The op's shipped list, or None where tracea ships none (or the file cannot be read: the caller goes on
    without it; `tracea export --config default` says why through export/defaults.load_defaults)."""
    import json

    try:
        return json.loads(defaults_path(op).read_text())
    except (OSError, ValueError):
        return None


def family_order(defaults: Mapping[str, Any], arch: str) -> list[str]:
    """The defaults' architecture families to try for `arch`: its own, then the nearest older ones."""
    families: Mapping[str, Sequence[str]] = defaults["families"]
    number = _arch_number(base_arch(arch))
    own = [f for f, members in families.items() if base_arch(arch) in members or arch in members]
    older = sorted((f for f in families if f not in own and min(_arch_number(a) for a in families[f]) <= number),
                   key=lambda f: -min(_arch_number(a) for a in families[f]))
    return own + older


def _arch_number(arch: str) -> int:
    return int(arch.removeprefix("sm_").rstrip("a"))


def applies(entry: Mapping[str, Any], problem: Any) -> bool:
    """An entry is for its dtype and, where it says so (`where`), only for problems whose fields are among those
    values."""
    key = problem.key()
    return entry["dtype"] == problem.dtype and all(key.get(name) in values
                                                   for name, values in entry.get("where", {}).items())


@dataclass(frozen=True)
class ShippedPick:
    """The first entry valid for one problem on one architecture: its family, index in the list, the entry, and its
    configuration as the problem's space names it."""

    family: str
    index: int
    entry: Mapping[str, Any]
    config: dict[str, Any]


def first_valid(defaults: Mapping[str, Any], problem: Any, arch: str, why_invalid: WhyInvalid,
                name_in: NameIn | None = None) -> tuple[ShippedPick | None, list[str]]:
    """(the first entry valid for `problem` on `arch`, of the architecture's own family, then of the nearest older
    ones; None where none is) and the reasons the entries before it were rejected. An entry is read as `name_in`
    names it in the problem's space (a staged entry is unstaged where the shape needs no copy)."""
    if not arch.startswith("sm_"):
        return None, []
    reasons: list[str] = []
    for family in family_order(defaults, arch):
        for i, entry in enumerate(defaults["defaults"]):
            if entry["family"] != family or not applies(entry, problem):
                continue
            config = dict(name_in(problem, entry["config"]) if name_in is not None else entry["config"])
            reason = why_invalid(config)
            if reason is None:
                return ShippedPick(family, i, entry, config), reasons
            reasons.append(reason)
    return None, reasons
