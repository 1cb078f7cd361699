"""Export -> import round trip, validation that refuses a whole file, merging rules, bad files."""

from __future__ import annotations

import json

import pytest

from tracea_cli.cache import TuningCache
from tracea_cli.cache.transfer import FORMAT, FORMAT_VERSION
from tracea_cli.errors import UsageError
from tracea_cli.space import Param, SearchSpace

SPACE = SearchSpace(
    params=(Param("block", (8, 16, 32, 64, 128)), Param("order", ("ijk", "ikj"), kind="categorical")),
    rules=(lambda c: "block 128 needs order ikj" if c["block"] == 128 and c["order"] != "ikj" else None,),
)


def validate(key, config):
    return SPACE.why_invalid(config)


@pytest.fixture
def filled(cache, mk_key, mk_trial):
    """A cache with two keys: trials (some failed), winners, a baseline and search state."""
    a, b = mk_key(1024), mk_key(2048, layout="nt")
    for i, block in enumerate((8, 16, 32)):
        cache.record_trial(a, mk_trial(block, 3.0 - i))
    cache.record_trial(a, mk_trial(64, status="wrong_result", reason="error 0.3 > 1e-05"))
    cache.set_winner(a, mk_trial(32, 1.0))
    cache.set_baseline(a, "numpy", mk_trial(config={}, median_ms=0.8))
    cache.record_search(a, strategy="bayes", budget=4, evaluations=4, converged=False)
    cache.record_trial(b, mk_trial(64, 5.0))
    return cache, a, b


def _dump(cache, key):
    return ([t.as_dict() for t in cache.trials(key)], cache.winner(key) and cache.winner(key).as_dict(),
            cache.baseline(key) and (cache.baseline(key)[0], cache.baseline(key)[1].as_dict()),
            cache.search_state(key) and cache.search_state(key).as_dict())


def test_export_then_import_round_trips_everything(filled, tmp_path):
    cache, a, b = filled
    out = tmp_path / "shared" / "team.json"
    assert cache.export(out) == 2
    data = json.loads(out.read_text())
    assert (data["format"], data["format_version"]) == (FORMAT, FORMAT_VERSION)
    assert {e["key"]["id"] for e in data["entries"]} == {a.id, b.id}
    assert "binary" not in out.read_text() and "cubin" not in out.read_text()

    with TuningCache.open(tmp_path / "other" / "tuning.sqlite3") as other:
        report = other.import_(out, validate)
        assert (report.entries, report.keys_added, report.keys_merged, report.trials_added, report.winners_set) == (2, 2, 0, 5, 1)
        assert sorted(k.id for k in other.keys()) == sorted([a.id, b.id])
        for key in (a, b):
            assert _dump(other, key) == _dump(cache, key)
        assert other.is_hit(a, 4) and not other.is_hit(b, 1)
        again = other.import_(out, validate)  # the same file twice adds nothing
        assert (again.trials_added, again.trials_skipped, again.keys_merged, again.winners_set) == (0, 5, 2, 0)
        assert len(other.trials(a)) == 4


def test_export_of_chosen_keys_only(filled, tmp_path):
    cache, a, b = filled
    assert cache.export(tmp_path / "one.json", keys=[b]) == 1
    assert [e["key"]["id"] for e in json.loads((tmp_path / "one.json").read_text())["entries"]] == [b.id]


def test_merge_keeps_the_faster_winner_and_the_larger_search(filled, tmp_path, mk_trial):
    cache, a, _ = filled
    out = tmp_path / "x.json"
    cache.export(out)
    with TuningCache.open(tmp_path / "o" / "tuning.sqlite3") as other:
        other.set_winner(a, mk_trial(16, 0.5))  # faster than the file's 1.0
        other.record_search(a, strategy="random", budget=10, evaluations=10, converged=False)
        other.import_(out, validate)
        assert other.winner(a).median_ms == 0.5
        s = other.search_state(a)
        assert (s.evaluations, s.budget) == (10, 10)
    with TuningCache.open(tmp_path / "p" / "tuning.sqlite3") as third:
        third.set_winner(a, mk_trial(16, 2.0))  # slower: replaced
        assert third.import_(out, validate).winners_set == 1
        assert third.winner(a).median_ms == 1.0


def _edit(path, change):
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda d: d["entries"][1]["trials"][0]["config"].update(block=48), r"entry 1 .*block=48 is not one of"),
        (lambda d: d["entries"][1]["trials"][0]["config"].update(block=128), r"entry 1 .*block 128 needs order ikj"),
        (lambda d: d["entries"][1]["winner"].update(config={"block": 8, "order": "ijk", "unroll": 4}), r"the winner.*unknown parameter"),
        (lambda d: d["entries"][1]["trials"][0]["config"].update(order='ijk"); system("rm -rf ~'), r"entry 1 .*order="),
        (lambda d: d["entries"][1]["trials"][0]["config"].update(block=[8]), r"config is not an object of plain values"),
        (lambda d: d["entries"][1]["trials"][0].update(status="fine"), r"status 'fine' is not one of"),
        (lambda d: d["entries"][1]["trials"][0].update(median_ms=None), r"a correct trial has no median_ms"),
        (lambda d: d["entries"][1]["trials"][0].update(timestamp="yesterday"), r"not an ISO 8601 time"),
        (lambda d: d["entries"][1]["key"].update(id="0123456789ab"), r"key.id does not match"),
        (lambda d: d["entries"][1]["key"]["sizes"].update(m=-4), r"key.sizes"),
        (lambda d: d["entries"][1]["key"]["problem"].update(m=[1, {"x": 2}]), r"key.problem is not an object of plain"),
        (lambda d: d["entries"][1]["search"].update(evaluations="many"), r"search.evaluations"),
    ],
)
def test_an_invalid_entry_refuses_the_whole_import(filled, tmp_path, change, message):
    cache, a, _ = filled
    out = tmp_path / "x.json"
    cache.export(out)
    # entry 0 (key b) is valid; the change goes into entry 1 (key a: trials, winner, baseline, search)
    _edit(out, lambda d: d["entries"].sort(key=lambda e: e["key"]["id"] == a.id))
    _edit(out, change)
    with TuningCache.open(tmp_path / "o" / "tuning.sqlite3") as other:
        with pytest.raises(UsageError, match=message) as err:
            other.import_(out, validate)
        assert "Nothing was imported" in err.value.hint
        assert other.keys() == []  # the valid first entry was not imported either


@pytest.mark.parametrize(
    "content, message",
    [
        (None, r"the import file .*missing\.json does not exist"),
        ("{not json", r"is not valid JSON \(line 1"),
        ("[1, 2]", r"is not a Tracea cache export"),
        (json.dumps({"format": FORMAT, "format_version": FORMAT_VERSION + 1, "entries": []}), r"uses export format 3"),
        (json.dumps({"format": FORMAT, "format_version": 1}), r"no \"entries\" list"),
        (json.dumps({"format": FORMAT, "format_version": 1, "entries": [{"key": 3}]}), r"entry 0 is refused: \"key\""),
    ],
)
def test_bad_files_are_usage_errors_naming_the_path(cache, tmp_path, content, message):
    path = tmp_path / "missing.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(UsageError, match=message) as err:
        cache.import_(path, validate)
    assert "missing.json" in err.value.message
    assert cache.keys() == []


def test_export_to_a_folder_is_a_usage_error(filled, tmp_path):
    cache, *_ = filled
    with pytest.raises(UsageError, match="is a folder"):
        cache.export(tmp_path)
