"""The JSON report: the results document itself (`bench.results.to_json`), raw samples included."""

from __future__ import annotations

from tracea_cli.bench.results import BenchResults, to_json


def render_json(results: BenchResults) -> str:
    return to_json(results)
