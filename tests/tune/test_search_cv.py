"""The cross-validation that chooses the default search's settings (benchmarks/search_cv.py): a choice never looks at
the held-out kernel, and it follows the documented steps. Runs on a stand-in for the traces, in milliseconds."""

from __future__ import annotations

from pathlib import Path

import pytest
from benchmark_modules import loaded


@pytest.fixture(scope="module")
def search_cv():
    with loaded("search_cv", "search_cv") as module:
        yield module


class StandInRuns:
    """Scores from a table (candidate overrides -> per-landscape score); refuses to score forbidden landscapes."""

    def __init__(self, table, forbidden=()):
        self.table, self.forbidden, self.ensured = table, set(forbidden), []

    def ensure(self, candidates, paths=None, repeats=None):
        self.ensured.extend(candidates)

    def score(self, c, paths, repeats=None):
        assert not self.forbidden & set(paths), "a choice looked at the held-out kernel"
        key = tuple(sorted(c.overrides.items()))
        per_landscape = self.table.get(key) or self._additive(c)
        return sum(per_landscape[p] for p in paths) / len(paths)

    def _additive(self, c):
        # a combination scores the start plus the gains of its parts (what the procedure hopes, not assumes)
        start = self.table[()]
        out = dict(start)
        for k, v in c.overrides.items():
            part = self.table[((k, v),)]
            for p in out:
                out[p] += part[p] - start[p]
        return out


def singles_of(search_cv, dimensions):
    start = search_cv.Candidate("start", {})
    return start, {dim: [(label, search_cv.Candidate(f"start, {dim}: {label}", o) if o else start)
                         for label, o in options] for dim, options in dimensions}


def test_a_choice_uses_the_training_landscapes_only_and_combines_the_winners(search_cv):
    a, b, held = Path("a.json"), Path("b.json"), Path("held.json")
    dimensions = (
        ("encoding", (("rank", {}), ("align", {"encoding": "rank+align"}))),
        ("portfolio", (("none", {}), ("1/3", {"local": 1 / 3}), ("1/2", {"local": 0.5}))),
        ("batch", (("1", {}), ("4", {"batch": 4}))),
    )
    table = {
        (): {a: 0.90, b: 0.90, held: 0.5},
        (("encoding", "rank+align"),): {a: 0.95, b: 0.93, held: 0.0},
        (("local", 1 / 3),): {a: 0.91, b: 0.92, held: 0.0},
        (("local", 0.5),): {a: 0.89, b: 0.90, held: 1.0},  # best on the held-out one: must not matter
        (("batch", 4),): {a: 0.88, b: 0.89, held: 1.0},
    }
    start, singles = singles_of(search_cv, dimensions)
    runs = StandInRuns(table, forbidden=[held])
    winners, path, choice = search_cv.choose(runs, [a, b], singles, start)
    assert winners["encoding"][0] == "align" and winners["portfolio"][0] == "1/3" and winners["batch"][0] == "1"
    assert [c.overrides for c in path] == [{"encoding": "rank+align", "local": 1 / 3}]
    assert choice.overrides == {"encoding": "rank+align", "local": 1 / 3}
    assert runs.ensured == path  # the combination was run before it was scored


def test_a_combination_that_scores_worse_than_its_best_part_is_not_chosen(search_cv):
    a, b = Path("a.json"), Path("b.json")
    dimensions = (
        ("encoding", (("rank", {}), ("align", {"encoding": "rank+align"}))),
        ("portfolio", (("none", {}), ("1/3", {"local": 1 / 3}))),
    )
    table = {
        (): {a: 0.90, b: 0.90},
        (("encoding", "rank+align"),): {a: 0.95, b: 0.95},
        (("local", 1 / 3),): {a: 0.92, b: 0.92},
        (("encoding", "rank+align"), ("local", 1 / 3)): {a: 0.80, b: 0.80},  # the two clash
    }
    start, singles = singles_of(search_cv, dimensions)
    _, _, choice = search_cv.choose(StandInRuns(table), [a, b], singles, start)
    assert choice.overrides == {"encoding": "rank+align"}


def test_the_start_is_the_search_before_the_cross_validation_and_every_value_is_a_setting(search_cv):
    from tracea_cli.tune.strategies.bayes import BayesSettings

    fields = set(BayesSettings.__dataclass_fields__)
    assert set(search_cv.START) <= fields
    for _, options in search_cv.DIMENSIONS:
        assert options[0][1] == {}  # each setting's first value is the start's
        for _, overrides in options:
            assert set(overrides) <= fields
            search_cv.Candidate("x", overrides).settings  # every candidate is a valid BayesSettings


def test_candidates_differ_in_their_key_exactly_when_their_settings_differ(search_cv):
    same = search_cv.Candidate("one", {"local": 0.5})
    again = search_cv.Candidate("another label", {"local": 0.5})
    other = search_cv.Candidate("one", {"local": 1 / 3})
    assert same.key == again.key != other.key



def test_a_variant_is_chosen_on_the_training_kernels_and_the_defaults_keep_ties(search_cv):
    a, b, held = Path("a.json"), Path("b.json"), Path("held.json")
    defaults = search_cv.Candidate("defaults", {"local": 0.5})
    wider = search_cv.Candidate("wider", {"local": 0.5, "radius": 2})
    even = search_cv.Candidate("even", {"local": 0.5, "local_from": 3})
    table = {
        (("local", 0.5),): {a: 0.90, b: 0.90, held: 0.1},
        (("local", 0.5), ("radius", 2)): {a: 0.92, b: 0.91, held: 0.0},
        (("local", 0.5), ("local_from", 3)): {a: 0.91, b: 0.90, held: 1.0},  # best held out: must not matter
    }
    runs = StandInRuns(table, forbidden=[held])
    assert search_cv.choose_variant(runs, [a, b], [defaults, wider, even]).label == "wider"
    tie = {(("local", 0.5),): {a: 0.9}, (("local", 0.5), ("radius", 2)): {a: 0.9}}
    assert search_cv.choose_variant(StandInRuns(tie), [a], [defaults, wider]).label == "defaults"


def test_the_variants_are_valid_settings_and_the_first_is_the_defaults(search_cv):
    from tracea_cli.tune.strategies.bayes import BayesSettings

    assert search_cv.VARIANTS[0][1] == search_cv.DEFAULTS
    assert search_cv.Candidate("d", search_cv.DEFAULTS).settings == BayesSettings()
    for _, overrides in search_cv.VARIANTS:
        search_cv.Candidate("x", overrides).settings
