"""Operations: each declares its problem, a float64 reference, its work (FLOPs, bytes) and its search spaces."""

from __future__ import annotations

from tracea_cli.errors import UsageError

KNOWN_OPS = ("gemm",)
PLANNED_OPS = ("conv2d", "lowrank-mlp", "attention")


def check_op(name: str) -> str:
    """Return the op's canonical name, or raise a usage error naming the ones we have."""
    if name in KNOWN_OPS:
        return name
    if name in PLANNED_OPS:
        raise UsageError(f"the {name} operation is not implemented yet.", f"Available: {', '.join(KNOWN_OPS)}.")
    raise UsageError(f"unknown operation {name!r}.", f"Available: {', '.join(KNOWN_OPS)}.")
