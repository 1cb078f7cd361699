"""What the ops' exported example programs share (ExportAbi.example): the C++ text of example_support.inc, the
element formats with round-to-nearest-even, a seeded uniform generator and host copies of random operands."""

from __future__ import annotations

from importlib import resources

from tracea_cli import __version__


def example_support() -> str:
    """example_support.inc, to paste where an example's template says @SUPPORT@ (after `Storage` and `kDType`)."""
    text = resources.files("tracea_cli.ops").joinpath("example_support.inc").read_text()
    return text.replace("@VERSION@", __version__)
