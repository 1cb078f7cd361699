"""Without torch installed, the torch parts of the API say so in one sentence."""

from __future__ import annotations

import importlib.util

import pytest

import tracea
from tracea_cli.errors import ToolchainMissing, UsageError


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="torch is installed here")
def test_patch_conv2d_and_from_fx_say_torch_is_needed():
    with pytest.raises(ToolchainMissing, match="needs torch"):
        tracea.patch_conv2d()
    with pytest.raises(UsageError, match="needs torch"):
        tracea.Graph.from_fx(object())
