"""The shipped default configurations (profiles/defaults/OP.json): what `--config default` exports.

Per dtype and architecture family (for GEMM: sm_80; sm_86/89; sm_90) an ordered list of configurations: the first
one valid for a problem's shape on the target architecture is taken (export/resolve.py). An entry may say for which
problems it is meant (`where`: a problem field -> its allowed values). Each entry carries its verification record:
`compiled-only` (with when and for which architectures it was compiled) until a correctness check on a GPU of its
family is recorded. The maintainer script benchmarks/defaults.py rebuilds the lists and records the checks.
"""

from __future__ import annotations

from typing import Any

from tracea_cli.ops.shipped import defaults_path

SCHEMA_VERSION = 1


def load_defaults(op: str) -> dict[str, Any]:
    from tracea_cli.errors import UsageError
    from tracea_cli.files import read_json

    path = defaults_path(op)
    if not path.exists():
        raise UsageError(f"tracea ships no default configurations for {op}.", "Pass --config FILE, or tune first.")
    return read_json(path, "shipped defaults", "Reinstall tracea.")
