"""docs/doctor.md stays true: every check is documented, and its Python example runs."""

from __future__ import annotations

import re
from pathlib import Path

from doctor_fakes import facts, scenario
from tracea_cli.doctor.checks import CHECKS, run_checks
from tracea_cli.doctor.profile import save_profile
from tracea_cli.doctor.run import make_profile

DOC = Path(__file__).resolve().parents[2] / "docs" / "doctor.md"


def test_every_check_is_in_the_guide():
    text = DOC.read_text()
    for spec in CHECKS:
        assert f"| `{spec.id}` |" in text, spec.id


def test_the_python_example_runs(isolated):
    f = facts(scenario("healthy-h200"))
    save_profile(make_profile(f, run_checks(f), [], [], previous=None, kind="quick"), isolated.profile_path)
    (block,) = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    scope: dict = {}
    exec(compile(block, str(DOC), "exec"), scope)
    assert scope["target"].arch == "sm_90" and scope["target"].limits.sm_count == 132
    assert scope["peak"] is None  # a quick profile has no measurements
