"""The list of operations: the only place that names them. The core asks `get_op(name)` and `op_names()`.

Built-in ops are one line each in `BUILTIN`. Other packages add ops without touching this file through the
`tracea.ops` entry-point group (`[project.entry-points."tracea.ops"] myop = "mypackage.myop:OP"`): an op is found
by name on first use and loaded then, so `tracea --help` imports no op's code.
"""

from __future__ import annotations

import importlib
import threading
from typing import Any

from tracea_cli.errors import UsageError

#: name -> "module:attribute" of its Op
BUILTIN: dict[str, str] = {
    "gemm": "tracea_cli.ops.gemm.op:OP",
    "conv2d": "tracea_cli.ops.conv2d.op:OP",
    "lowrank-mlp": "tracea_cli.ops.lowrank_mlp.op:OP",
    "attention": "tracea_cli.ops.attention.op:OP",
}
ENTRY_POINT_GROUP = "tracea.ops"
#: the op a bench suite-file entry without "op" means (files written when it was the only one)
DEFAULT_OP = "gemm"

_loaded: dict[str, Any] = {}
_lock = threading.Lock()


def _plugins() -> dict[str, str]:
    from importlib.metadata import entry_points

    return {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name not in BUILTIN}


def op_names() -> tuple[str, ...]:
    """Every op this installation has: the built-in ones, then plug-ins, each name once."""
    return (*BUILTIN, *sorted(_plugins()))


def _load(target: str) -> Any:
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module), attribute)


def get_op(name: str) -> Any:
    """The op called `name`, or a UsageError naming the ones there are."""
    with _lock:
        if name in _loaded:
            return _loaded[name]
        target = BUILTIN.get(name) if isinstance(name, str) else None
        if target is None and isinstance(name, str):
            target = _plugins().get(name)
        if target is None:
            raise UsageError(f"unknown operation {name!r}.", f"Available: {', '.join(op_names())}.")
        op = _load(target)
        if getattr(op, "name", None) != name:
            raise UsageError(f"the operation registered as {name!r} names itself {getattr(op, 'name', None)!r}.",
                             "Fix its entry point.")
        _loaded[name] = op
        return op
