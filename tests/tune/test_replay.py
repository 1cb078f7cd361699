"""Replay: loading recorded landscapes (Kernel Tuner files), scoring strategies side by side, the JSON fields, the
terminal view, and bad input (every one a UsageError naming the path)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tracea_cli.errors import UsageError
from tracea_cli.tune.landscape import Landscape, load_landscape, synthetic_landscape
from tracea_cli.tune.replay import render_replay, replay, run_replay

LANDSCAPES = Path(__file__).resolve().parents[2].parent / "shared" / "landscapes"
needs_landscapes = pytest.mark.skipif(not LANDSCAPES.is_dir(), reason=f"recorded landscapes not present at {LANDSCAPES}")


def write_kernel_tuner_file(landscape: Landscape, path: Path) -> Path:
    """A landscape as a Kernel Tuner cache file (the format of ../shared/landscapes/)."""
    keys = [p.name for p in landscape.params]
    cache = {}
    for config, time, failure in zip(landscape.configs, landscape.times, landscape.failures):
        record = dict(config)
        record["time"] = failure if failure is not None else time
        record["times"] = [] if failure is not None else [time, time]
        cache[",".join(str(config[k]) for k in keys)] = record
    data = {
        "device_name": "Synthetic GPU",
        "kernel_name": "synthetic_kernel",
        "problem_size": [1024],
        "tune_params_keys": keys,
        "tune_params": {p.name: list(p.values) for p in landscape.params},
        "objective": "time",
        "cache": cache,
    }
    path.write_text(json.dumps(data))
    return path


@pytest.fixture()
def landscape_file(tmp_path):
    return write_kernel_tuner_file(synthetic_landscape(0, small=True), tmp_path / "kt.json")


# -- loading ------------------------------------------------------------------------------------------------------


def test_a_kernel_tuner_file_loads_with_its_failures(landscape_file):
    original = synthetic_landscape(0, small=True)
    loaded = load_landscape(landscape_file)
    assert len(loaded) == len(original) and loaded.failed == original.failed > 0
    assert loaded.optimum == pytest.approx(original.optimum)
    assert loaded.unit == "ms" and loaded.kernel == "synthetic_kernel" and loaded.device == "Synthetic GPU"
    assert [p.kind for p in loaded.params] == [p.kind for p in original.params]
    failed = [i for i, f in enumerate(loaded.failures) if f is not None]
    assert all(loaded.failures[i] == "CompilationFailedConfig" and math.isinf(loaded.times[i]) for i in failed)
    assert dict(loaded.configs[0]) == dict(original.configs[0])


def test_keys_are_used_when_records_do_not_repeat_the_parameters(tmp_path):
    data = {
        "tune_params_keys": ["bx", "variant"],
        "tune_params": {"bx": [32, 64], "variant": ["a", "b"]},
        "cache": {"32,a": {"time": 2.0}, "64,a": {"time": 1.0}, "64,b": {"time": "RuntimeFailedConfig"}},
    }
    path = tmp_path / "k.json"
    path.write_text(json.dumps(data))
    loaded = load_landscape(path)
    assert [dict(c) for c in loaded.configs] == [{"bx": 32, "variant": "a"}, {"bx": 64, "variant": "a"}, {"bx": 64, "variant": "b"}]
    assert loaded.times[:2] == (2.0, 1.0) and loaded.failures[2] == "RuntimeFailedConfig"
    assert [p.kind for p in loaded.params] == ["ordinal", "categorical"]


def tracea_export(entries: list[dict], version: int = 1) -> dict:
    return {"format": "tracea-cache-export", "format_version": version, "tracea_version": "0.1.0",
            "exported": "2026-11-29T18:50:00.000000Z", "entries": entries}


def trial(config: dict, median_ms: float | None, status: str = "ok") -> dict:
    return {"config": config, "status": status, "reason": "" if status == "ok" else "it broke",
            "samples_ms": [] if median_ms is None else [median_ms], "median_ms": median_ms, "cv": None,
            "rel_error": None, "compile_s": 0.1, "timestamp": "2026-11-29T18:41:02.125000Z"}


def test_a_tracea_cache_export_loads_its_largest_entry(tmp_path):
    small = {"key": {"id": "aaaaaaaaaaaa", "op": "gemm", "device_class": "CPU"}, "trials": [trial({"bm": 32}, 1.0)]}
    large = {
        "key": {"id": "7b9d95751ffd", "op": "gemm", "device_class": "NVIDIA H200 | cc 9.0"},
        "trials": [
            trial({"bm": 64, "family": "mma"}, 2.0),
            trial({"bm": 128, "family": "mma"}, None, status="compile_error"),
            trial({"bm": 64, "family": "simt"}, 3.0),
            trial({"bm": 64, "family": "mma"}, 1.5),  # the same configuration again: the better time counts
            trial({"bm": 32, "family": "simt"}, None, status="wrong_result"),
        ],
    }
    path = tmp_path / "export.json"
    path.write_text(json.dumps(tracea_export([small, large])))
    loaded = load_landscape(path)
    assert "7b9d95751ffd" in loaded.source and loaded.kernel == "gemm" and loaded.device.startswith("NVIDIA H200")
    assert len(loaded) == 4 and loaded.failed == 2 and loaded.optimum == 1.5
    assert [p.name for p in loaded.params] == ["bm", "family"]
    assert loaded.params[0].values == (32, 64, 128) and loaded.params[1].kind == "categorical"
    failures = {tuple(c.values()): f for c, f in zip(loaded.configs, loaded.failures)}
    assert failures[(128, "mma")] == "compile_error" and failures[(64, "mma")] is None
    result = run_replay(path, strategy="bayes", budget=4, repeats=2, seed=0)
    assert result.as_dict()["configurations"] == 4 and result.score("bayes").mean_fraction == 1.0


@pytest.mark.parametrize(
    "document, says",
    [
        (tracea_export([], version=2), "format version 2, newer"),
        (tracea_export([{"trials": [trial({"a": 1}, None, status="")]}]), "no `status`"),
        (tracea_export([{"trials": [trial({"a": 1}, -1.0)]}]), "positive `median_ms`"),
        (tracea_export([{"trials": [trial({"a": 1}, 1.0), trial({"b": 1}, 1.0)]}]), "same parameters"),
        (tracea_export([{"trials": [trial({"a": [1]}, 1.0)]}]), "not a number or a text"),
        (tracea_export([{"trials": []}]), "no entry holds any trials"),
    ],
)
def test_bad_tracea_exports_are_usage_errors(tmp_path, document, says):
    path = tmp_path / "export.json"
    path.write_text(json.dumps(document))
    with pytest.raises(UsageError) as caught:
        load_landscape(path)
    assert str(path) in caught.value.message and says in caught.value.message


@pytest.mark.parametrize(
    "content, says",
    [
        (None, "does not exist"),
        ("{not json", "not valid JSON"),
        ('{"hello": 1}', "neither a Kernel Tuner cache file"),
        ('{"tune_params_keys": ["a"], "tune_params": {"a": [1]}, "cache": {}}', "holds no configurations"),
        ('{"tune_params_keys": ["a"], "tune_params": {}, "cache": {"1": {"time": 1}}}', "does not list values"),
        ('{"tune_params_keys": ["a"], "tune_params": {"a": [1]}, "cache": {"7": {"time": 1}}}', "does not match"),
        ('{"tune_params_keys": ["a"], "tune_params": {"a": [1]}, "objective": "GFLOP/s", "cache": {"1": {"time": 1}}}', "objective"),
        ('{"format": "tracea-cache-export", "format_version": 1, "entries": []}', "Tracea cache export"),
    ],
)
def test_bad_landscape_files_are_usage_errors_naming_the_path(tmp_path, content, says):
    path = tmp_path / "landscape.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(UsageError) as caught:
        run_replay(path, strategy="bayes", budget=20, repeats=1, seed=0)
    assert str(path) in caught.value.message and says in caught.value.message
    assert caught.value.exit_code == 2


def test_a_folder_is_not_a_landscape(tmp_path):
    with pytest.raises(UsageError, match="is a folder"):
        run_replay(tmp_path, strategy="random", budget=20, repeats=1, seed=0)


@pytest.mark.parametrize(
    "options, says",
    [
        ({"strategy": "anneal"}, "unknown search strategy"),
        ({"budget": 0}, "budget"),
        ({"repeats": 0}, "repeats"),
        ({"seed": -2}, "seed"),
    ],
)
def test_bad_options_are_usage_errors(landscape_file, options, says):
    kwargs = {"strategy": "bayes", "budget": 20, "repeats": 1, "seed": 0, **options}
    with pytest.raises(UsageError, match=says):
        run_replay(landscape_file, **kwargs)


def test_a_landscape_where_everything_failed_has_no_optimum(tmp_path):
    data = {"tune_params_keys": ["a"], "tune_params": {"a": [1, 2]}, "cache": {"1": {"time": "InvalidConfig"}, "2": {"time": "RuntimeFailedConfig"}}}
    path = tmp_path / "dead.json"
    path.write_text(json.dumps(data))
    with pytest.raises(UsageError, match="every configuration"):
        run_replay(path, strategy="random", budget=5, repeats=1, seed=0)


# -- scoring ------------------------------------------------------------------------------------------------------


def test_replay_json_has_exactly_the_documented_fields(landscape_file):
    result = run_replay(landscape_file, strategy="bayes", budget=45, repeats=3, seed=7)
    data = json.loads(json.dumps(result.as_dict()))
    assert set(data) == {"configurations", "optimum", "optimum_unit", "budget", "repeats", "strategies"}
    original = synthetic_landscape(0, small=True)
    assert data["configurations"] == len(original)
    assert data["optimum"] == pytest.approx(original.optimum) and data["optimum_unit"] == "ms"
    assert (data["budget"], data["repeats"]) == (45, 3)
    assert set(data["strategies"]) == {"bayes", "random"}
    for score in data["strategies"].values():
        assert set(score) == {"mean_fraction", "share_within_95", "curve"}
        assert 0 < score["mean_fraction"] <= 1 and 0 <= score["share_within_95"] <= 1
        assert len(score["curve"]) == 2  # budgets 20 and 40
        assert score["curve"][0] <= score["curve"][1] <= score["mean_fraction"] + 1e-12


def test_fractions_follow_the_definition():
    landscape = synthetic_landscape(3, small=True)
    result = replay(landscape, strategy="random", budget=len(landscape), repeats=2, seed=0)
    assert [s.name for s in result.strategies] == ["random"]  # random is not run twice
    score = result.score("random")
    assert score.mean_fraction == 1.0 and score.share_within_95 == 1.0  # the whole space: optimum found
    for trace in score.fractions:
        assert all(a <= b for a, b in zip(trace, trace[1:]))  # best-so-far never gets worse
        first_success = next(f for f in trace if f > 0)
        assert 0 < first_success <= 1


def test_both_strategies_see_the_same_seeds_and_results_repeat():
    landscape = synthetic_landscape(2, small=True)
    a = replay(landscape, strategy="bayes", budget=20, repeats=2, seed=5)
    b = replay(landscape, strategy="bayes", budget=20, repeats=2, seed=5)
    assert a == b
    c = replay(landscape, strategy="grid", budget=20, repeats=2, seed=5)
    assert c.score("random") == a.score("random")


def test_a_budget_beyond_the_space_holds_the_best_found():
    landscape = synthetic_landscape(3, small=True)
    result = replay(landscape, strategy="grid", budget=len(landscape) + 30, repeats=1, seed=0)
    trace = result.score("grid").fractions[0]
    assert len(trace) == len(landscape) + 30 and trace[-1] == 1.0


def test_render_replay_shows_both_strategies_at_a_fixed_width(landscape_file):
    from rich.console import Console

    result = run_replay(landscape_file, strategy="bayes", budget=40, repeats=2, seed=0)
    console = Console(width=100, record=True, color_system=None)
    render_replay(result, console)
    text = console.export_text()
    assert "bayes" in text and "random" in text and "@40" in text
    assert f"{result.score('bayes').mean_fraction:.3f}" in text
    assert str(landscape_file) in text.replace("\n", "")


# -- the recorded landscapes --------------------------------------------------------------------------------------


@needs_landscapes
@pytest.mark.parametrize(
    "name, configurations, failed",
    [("convolution_RTX_3090.json", 6768, 1548), ("pnpoly_RTX_3090.json", 4092, 318)],
)
def test_recorded_landscapes_load_as_their_readme_says(name, configurations, failed):
    landscape = load_landscape(LANDSCAPES / name)
    assert (len(landscape), landscape.failed) == (configurations, failed)
    assert landscape.optimum == min(t for t in landscape.times if math.isfinite(t))


@needs_landscapes
def test_replay_runs_on_a_recorded_landscape():
    result = run_replay(LANDSCAPES / "pnpoly_RTX_3090.json", strategy="bayes", budget=20, repeats=1, seed=0)
    data = result.as_dict()
    assert data["configurations"] == 4092 and data["optimum_unit"] == "ms"
    assert data["strategies"]["bayes"]["mean_fraction"] > 0.5


# -- compressed and oversized files -------------------------------------------------------------------------------


def test_a_gzip_compressed_landscape_loads_like_the_plain_one(landscape_file, tmp_path):
    import gzip

    plain = load_landscape(landscape_file)
    packed = tmp_path / "kt.json.gz"
    packed.write_bytes(gzip.compress(landscape_file.read_bytes()))
    unnamed = tmp_path / "packed.json"  # told by its first bytes, not by its name
    unnamed.write_bytes(packed.read_bytes())
    for path in (packed, unnamed):
        loaded = load_landscape(path)
        assert (loaded.configs, loaded.times, loaded.failures) == (plain.configs, plain.times, plain.failures)
    two_members = tmp_path / "two.json.gz"  # what `cat a.gz b.gz` makes: gzip reads it as one stream
    text = landscape_file.read_bytes()
    two_members.write_bytes(gzip.compress(text[:100]) + gzip.compress(text[100:]))
    assert load_landscape(two_members).times == plain.times


@pytest.mark.parametrize(
    "content, says",
    [
        ("truncated", "truncated gzip file"),
        ("corrupt", "not a valid one"),
        ("latin-1", "not UTF-8"),
        ("deep", "nests its JSON too deeply"),
    ],
)
def test_broken_compressed_or_nested_files_are_usage_errors(landscape_file, tmp_path, content, says):
    import gzip

    packed = gzip.compress(landscape_file.read_bytes())
    data = {
        "truncated": packed[: len(packed) // 2],
        "corrupt": packed[:10] + bytes(b ^ 0x5A for b in packed[10:]),
        "latin-1": gzip.compress('{"kernel_name": "caf\xe9"}'.encode("latin-1")),
        "deep": ("[" * 100_000 + "]" * 100_000).encode(),
    }[content]
    path = tmp_path / "landscape.json.gz"
    path.write_bytes(data)
    with pytest.raises(UsageError) as caught:
        load_landscape(path)
    assert str(path) in caught.value.message and says in caught.value.message


def test_oversized_files_and_decompression_bombs_are_refused(tmp_path, monkeypatch):
    import gzip

    import tracea_cli.tune.landscape as landscape_module

    monkeypatch.setattr(landscape_module, "MAX_FILE_BYTES", 4096)
    big = tmp_path / "big.json"
    big.write_text(" " * 5000 + "{}")
    with pytest.raises(UsageError, match="is larger than"):
        load_landscape(big)
    bomb = tmp_path / "bomb.json.gz"
    bomb.write_bytes(gzip.compress(b" " * 1_000_000 + b"{}"))  # 1 kB on disk
    assert bomb.stat().st_size < 4096
    with pytest.raises(UsageError, match="decompresses to more than"):
        load_landscape(bomb)


@needs_landscapes
@pytest.mark.parametrize(
    "name, configurations, failed",
    [
        ("gemm_RTX_3090.json.gz", 17956, 0),
        ("dedispersion_A4000.json.gz", 11130, 0),
        ("convolution_MI250X.json.gz", 4362, 0),
        ("adding_A100.json.gz", 4654, 0),
    ],
)
def test_compressed_recorded_landscapes_load_as_their_readme_says(name, configurations, failed):
    landscape = load_landscape(LANDSCAPES / name)
    assert (len(landscape), landscape.failed) == (configurations, failed)


def test_the_methodology_score_is_zero_for_random_and_one_for_the_optimum():
    from tracea_cli.tune.replay import methodology_score

    random = [0.8, 0.9, 1.0]
    assert methodology_score(random, random) == 0.0
    assert methodology_score([1.0, 1.0, 1.0], random) == pytest.approx(2 / 3)  # a budget where random is at 1 counts 0
    assert methodology_score([0.9, 0.95], [0.8, 0.9]) == pytest.approx(0.5)
    assert methodology_score([0.7], [0.8]) < 0  # worse than random
    with pytest.raises(ValueError):
        methodology_score([0.9], [0.8, 0.9])


def test_a_search_trace_takes_a_strategy_by_name_or_by_maker():
    from tracea_cli.tune.replay import search_trace
    from tracea_cli.tune.strategies.bayes import BayesSearch, BayesSettings

    landscape = synthetic_landscape(2, small=True)
    by_name = search_trace(landscape, "bayes", budget=15, seed=1)
    by_maker = search_trace(landscape, lambda c, seed: BayesSearch(c, seed=seed, settings=BayesSettings()), budget=15,
                            seed=1)
    assert by_name == by_maker and len(by_name) == 15
