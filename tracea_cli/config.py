"""Every environment variable Tracea reads, declared once with its type, default and meaning.

Core code never reads os.environ: commands build a `Settings` with `Settings.from_env()` and pass it down.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

#: name -> meaning, shown in docs and `tracea --help`
ENVIRONMENT = {
    "TRACEA_CACHE_DIR": "folder of the tuning cache (tuning.sqlite3); default: the user cache folder",
    "TRACEA_KERNEL_CACHE_DIR": "folder of compiled CPU kernels (numba); default: TRACEA_CACHE_DIR/numba; off: none",
    "TRACEA_DATA_DIR": "folder of capability profiles and reports; default: the user data folder",
    "TRACEA_DEBUG": "1 shows tracebacks for errors (same as --debug)",
    "TRACEA_WORKER_TIMEOUT_S": "seconds one candidate may run in a tuning worker before it is killed (default 60)",
    "TRACEA_SLOW_TESTS": "1 enables the opt-in slow tests (whole search spaces compiled)",
    "NO_COLOR": "any value turns colour off",
}


def _flag(env: Mapping[str, str], name: str) -> bool:
    return env.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


@dataclass(frozen=True)
class Settings:
    cache_dir: Path
    data_dir: Path
    debug: bool = False
    no_color: bool = False
    worker_timeout_s: float = 60.0
    extra: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "Settings":
        env = os.environ if env is None else env
        import platformdirs

        cache = env.get("TRACEA_CACHE_DIR") or platformdirs.user_cache_dir("tracea")
        data = env.get("TRACEA_DATA_DIR") or platformdirs.user_data_dir("tracea")
        try:
            timeout = float(env.get("TRACEA_WORKER_TIMEOUT_S", "60"))
        except ValueError:
            timeout = 60.0
        return cls(
            cache_dir=Path(cache).expanduser(),
            data_dir=Path(data).expanduser(),
            debug=_flag(env, "TRACEA_DEBUG"),
            no_color="NO_COLOR" in env,
            worker_timeout_s=timeout,
        )

    @property
    def profile_path(self) -> Path:
        return self.data_dir / "profile.json"

    @property
    def cache_path(self) -> Path:
        return self.cache_dir / "tuning.sqlite3"
