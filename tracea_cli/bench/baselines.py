"""Which baselines a run may ask for. Each op declares its own (ops/base.Baseline: a library call on the same problem,
checked and timed like a kernel); `auto` is the op's default library on the run's backend, `none` times no baseline.
"""

from __future__ import annotations

import importlib.util

from tracea_cli.errors import ToolchainMissing, UsageError
from tracea_cli.ops.registry import get_op

SPECIAL = ("auto", "none")


def check_baseline(choice: str, *, ops: tuple[str, ...], backend: str | None) -> None:
    """Raise a usage error when `choice` is absent for an op, or on the backend the run uses.

    `backend=None` checks only what needs no machine (the name, the ops), so bad input fails before any work.
    """
    if choice in SPECIAL:
        return
    for op_name in ops:
        have = {b.name: b for b in get_op(op_name).baselines}
        if choice not in have:
            raise UsageError(f"{op_name} has no baseline {choice!r}: its baselines are {', '.join(have) or 'none'}.",
                             "Use --baseline auto, none, or one of those.")
        if backend is not None and backend not in have[choice].backends:
            runs_on = " or ".join(have[choice].backends)
            raise UsageError(f"--baseline {choice} runs on the {runs_on} backend, and this run uses {backend}.",
                             f"Use --backend {runs_on}, or --baseline auto.")
        module = have[choice].requires
        if backend is not None and module and importlib.util.find_spec(module) is None:
            raise ToolchainMissing(f"--baseline {choice} needs the Python module {module}, which is not installed.",
                                   f"Install {module}, or use --baseline auto.")
