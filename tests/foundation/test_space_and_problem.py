"""Search-space primitives, dtypes and the correctness policy (the GEMM problem: tests/ops)."""

import numpy as np
import pytest

from tracea_cli.ops.dtypes import bf16_from_bits, representable, round_to_bf16, to_storage
from tracea_cli.ops.verify import check
from tracea_cli.space import Candidates, Param, SearchSpace, config_key


def _space():
    return SearchSpace(
        params=(Param("tile", (16, 32, 64)), Param("order", ("ij", "ji"), kind="categorical")),
        rules=(lambda c: "tile 64 needs order ij" if c["tile"] == 64 and c["order"] == "ji" else None,),
    )


def test_space_enumerates_and_explains_rejections():
    space = _space()
    assert len(list(space.all_configs())) == 6
    valid = space.valid_configs()
    assert len(valid) == 5 and {"tile": 64, "order": "ji"} not in valid
    assert space.why_invalid({"tile": 64, "order": "ji"}) == "tile 64 needs order ij"
    assert "not one of" in space.why_invalid({"tile": 48, "order": "ij"})
    assert "missing" in space.why_invalid({"tile": 16})
    assert "unknown" in space.why_invalid({"tile": 16, "order": "ij", "x": 1})
    assert all(reason for _, reason in space.rejections())
    cands = Candidates.from_space(space)
    assert len(cands) == 5 and cands.index_of()[config_key({"order": "ij", "tile": 16})] == 0


def test_param_rejects_duplicates():
    with pytest.raises(ValueError):
        Param("x", (1, 1))


def test_config_key_is_canonical():
    assert config_key({"b": 1, "a": "x"}) == config_key({"a": "x", "b": 1}) == '{"a":"x","b":1}'


def test_bf16_rounding_is_nearest_even():
    x = np.array([1.0, 1.00390625, 1.01171875, -3.14159], dtype=np.float32)  # 1 + 2^-8 is a tie
    r = round_to_bf16(x)
    assert r[0] == 1.0 and r[1] == 1.0 and r[2] == np.float32(1.015625)
    assert np.array_equal(bf16_from_bits(to_storage(x, "bf16")), r)


def test_verdicts_follow_the_policy():
    ref = np.random.default_rng(0).uniform(-1, 1, size=(17, 33))
    assert check(ref.astype(np.float32), ref, "fp32").ok
    poisoned = ref.copy()
    poisoned[3, 4] = np.nan
    v = check(poisoned, ref, "fp32")
    assert not v.ok and "NaN" in v.reason
    assert not check(ref * 1.01, ref, "fp32").ok
    assert check(representable(ref, "bf16"), ref, "bf16").ok


def test_union_space_keeps_each_family_its_own_parameters():
    from tracea_cli.space import UnionSpace

    a = SearchSpace(params=(Param("family", ("simt",), "categorical"), Param("tile", (32, 64))))
    b = SearchSpace(params=(Param("family", ("wgmma",), "categorical"), Param("tile", (64, 128)), Param("cluster", (1, 2))),
                    rules=(lambda c: "cluster 2 needs tile 128" if c["cluster"] == 2 and c["tile"] != 128 else None,))
    u = UnionSpace((a, b))
    assert [p.values for p in u.params] == [("simt", "wgmma"), (32, 64, 128), (None, 1, 2)]
    assert u.param("family").kind == "categorical" and u.param("tile").kind == "ordinal"
    valid = u.valid_configs()
    assert {"family": "simt", "tile": 32} in valid and {"family": "wgmma", "tile": 128, "cluster": 2} in valid
    assert len(valid) == 2 + 3
    assert u.why_invalid({"family": "wgmma", "tile": 64, "cluster": 2}) == "cluster 2 needs tile 128"
    assert "not one of" in u.why_invalid({"family": "hmma", "tile": 64})
    assert u.why_invalid({"family": "simt", "tile": 32, "cluster": 1}).startswith("unknown parameter")
    cands = Candidates.from_space(u)
    from tracea_cli.tune.strategies.bayes import encode

    x = encode(cands.params, cands.configs)
    assert x.shape[0] == 5 and np.all((x >= 0) & (x <= 1))


def test_every_strategy_searches_a_union_of_families():
    from tracea_cli.space import UnionSpace
    from tracea_cli.tune.strategies import make_strategy

    a = SearchSpace(params=(Param("family", ("simt",), "categorical"), Param("tile", tuple(range(1, 30)))))
    b = SearchSpace(params=(Param("family", ("wgmma",), "categorical"), Param("tile", (64, 128)), Param("cluster", (1, 2))))
    cands = Candidates.from_space(UnionSpace((a, b)))
    for name in ("bayes", "random", "grid"):
        s = make_strategy(name, cands, seed=1)
        seen = set()
        while picks := s.ask(4):
            for i in picks:
                c = cands.configs[i]
                s.tell(i, 1.0 / c["tile"] if c["family"] == "wgmma" else float(c["tile"]))
                seen.add(i)
        assert seen == set(range(len(cands)))


def test_a_parameter_with_a_default_may_be_missing_from_a_configuration():
    from tracea_cli.space import Param, SearchSpace

    space = SearchSpace(params=(Param("tile", (16, 32)), Param("slices", (1, 2), default=1)),
                        rules=(lambda c: "two slices need 32" if c["slices"] == 2 and c["tile"] != 32 else None,))
    assert space.why_invalid({"tile": 16}) is None  # stored before "slices" existed: means slices=1
    assert space.complete({"tile": 16}) == {"tile": 16, "slices": 1}
    assert "two slices" in space.why_invalid({"tile": 16, "slices": 2})
    assert "parameter tile is missing" in space.why_invalid({"slices": 1})
