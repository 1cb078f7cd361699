"""Keys as the first Tracea caches wrote them: layouts 1 and 2 of the cache file, format 1 of its export.

Those held GEMM keys only, in fixed fields: `layout`, `shape` (m, n, k) and `epilogue`. Today a key carries the op's
own problem key, which for GEMM is exactly those fields (`{m, n, k, layout, epilogue}`), and its sizes (`{m, n, k}`).
This module turns an old key into today's, and computes the id an old key had, so that an old export's `id` can
still be checked. Nothing else in the cache reads the old form.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Mapping

from tracea_cli.cache.records import CacheKey


def legacy_problem(shape: Mapping[str, int], layout: str, epilogue: str) -> dict[str, Any]:
    return {**{k: int(v) for k, v in shape.items()}, "layout": layout, "epilogue": epilogue}


def from_legacy(*, op: str, backend: str, dtype: str, layout: str, shape: Mapping[str, int], epilogue: str,
                device_class: str, arch: str | None, source_hash: str, toolchain: Mapping[str, str],
                schema_version: int) -> CacheKey:
    """Today's key for an old one (its id changes; its identity does not)."""
    return CacheKey(op=op, backend=backend, dtype=dtype, problem=legacy_problem(shape, layout, epilogue), sizes=shape,
                    device_class=device_class, arch=arch, source_hash=source_hash, toolchain=toolchain,
                    schema_version=schema_version)


def legacy_digest(*, op: str, backend: str, dtype: str, layout: str, shape: Mapping[str, int], epilogue: str,
                  device_class: str, arch: str | None, source_hash: str, toolchain: Mapping[str, str],
                  schema_version: int) -> str:
    """The id (SHA-256 hex) an old key had: the canonical JSON of its old identity."""
    identity: dict[str, Any] = {
        "op": op, "backend": backend, "dtype": dtype, "layout": layout, "shape": dict(sorted(shape.items())),
        "epilogue": epilogue, "device_class": device_class, "source_hash": source_hash,
        "toolchain": dict(sorted(toolchain.items())), "schema_version": schema_version,
    }
    if arch is not None:
        identity["arch"] = arch
    return hashlib.sha256(json.dumps(identity, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
