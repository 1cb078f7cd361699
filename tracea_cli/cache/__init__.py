"""The tuning cache: every trial, the winner and the search state per key, in SQLite (docs/cache.md).

    with TuningCache.open(settings.cache_path) as cache:
        for w in cache.warnings: console.print(w)
        if cache.is_hit(key, budget): ...
        cache.record_trial(key, Trial(config, status="ok", samples_ms=..., median_ms=..., cv=...))

Modules: `records` (the data), `db` (the file: opening, layout, migrations), `store` (`TuningCache`), `transfer`
(the export/import format), `validate` (checking imported configurations against the op's search space).
"""

from tracea_cli.cache.records import (
    KEY_SCHEMA_VERSION,
    STATUSES,
    CacheKey,
    ImportReport,
    KeySummary,
    PruneReport,
    SearchState,
    Trial,
)
from tracea_cli.cache.store import TuningCache

__all__ = [
    "KEY_SCHEMA_VERSION",
    "STATUSES",
    "CacheKey",
    "ImportReport",
    "KeySummary",
    "PruneReport",
    "SearchState",
    "Trial",
    "TuningCache",
]
