"""The installed package finds its shipped data (kernels/, profiles/) and its entry points."""

import subprocess
import sys
from pathlib import Path

import tracea_cli
from tracea_cli import resources


def test_kernels_and_profiles_are_found():
    kernels = resources.kernels_dir()
    profiles = resources.profiles_dir()
    assert (kernels / "cuda").is_dir() and any((kernels / "cuda").glob("*.cuh"))
    assert profiles.is_dir() and any(profiles.rglob("*.json"))


def test_installed_copy_uses_its_own_data():
    pkg = Path(tracea_cli.__file__).resolve().parent
    if "site-packages" not in str(pkg):
        import pytest

        pytest.skip("running from a source checkout, not an installed copy")
    assert resources.kernels_dir().resolve().parent == pkg
    assert resources.profiles_dir().resolve().parent == pkg


def test_python_dash_m_and_version():
    out = subprocess.run([sys.executable, "-m", "tracea_cli", "--version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == f"tracea {tracea_cli.__version__}"
