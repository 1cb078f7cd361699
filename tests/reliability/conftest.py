"""The fault-injection suite's helpers (invariants, faulty backends) import by name, under pytest's importlib mode
and in the worker processes the tuning driver spawns."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
