"""What a tune evaluates before its strategy proposes anything (tune/setup.first_configs): the nearest cached
winners, then the op's shipped default for the problem on the GPU's architecture (the one `tracea export --config
default` takes), then the families' hand picks; each once, only valid ones. No GPU: the plan is built for sm_90a."""

from __future__ import annotations

import pytest

from tracea_cli.backends.op_backend import OpBackend
from tracea_cli.cache import TuningCache
from tracea_cli.export import resolve
from tracea_cli.ops.gemm.problem import GemmProblem
from tracea_cli.space import config_key
from tracea_cli.target import arch_target
from tracea_cli.tune import setup


def _plan(problem, target, backend="cuda"):
    op_backend = OpBackend(problem.op, backend)
    return setup.Plan(problem, target, (None,), op_backend, setup.cache_key(problem, op_backend, target))


@pytest.mark.parametrize("dtype,layout", [("tf32", "nn"), ("bf16", "nt"), ("fp32", "nn")])
def test_the_shipped_default_comes_first_on_an_empty_cache_then_the_hand_picks(tmp_path, dtype, layout):
    problem = GemmProblem(4096, 4096, 4096, dtype, layout)
    target = arch_target("sm_90a")
    plan = _plan(problem, target)
    candidates = plan.candidates()
    cache = TuningCache.open(tmp_path / "tuning.sqlite3")
    first = setup.first_configs(cache, plan.key, plan, candidates)
    exported = resolve.from_defaults([problem], ["sm_90a"], lambda p, a: lambda c: plan.backend.why_invalid(p, target, c),
                                     name_in=plan.backend.config_in)[0].config
    # the shipped entry predates split_k: the tune takes it completed with the parameter's default
    space = plan.backend.space(problem, target)
    assert config_key(first[0]) == config_key(space.complete(exported))
    suggested = [space.complete(c) for c in plan.suggested()]
    suggested = [c for c in suggested if config_key(c) != config_key(space.complete(exported))]
    assert [config_key(c) for c in first[1:]] == [config_key(c) for c in suggested if config_key(c) in
                                                    candidates.index_of()][:len(first) - 1]
    assert len({config_key(c) for c in first}) == len(first)


def test_no_shipped_default_on_the_cpu_or_where_none_is_valid():
    problem = GemmProblem(512, 512, 512, "fp32")
    cpu = _plan(problem, arch_target("sm_90a"), backend="cpu")
    assert setup.shipped_default(cpu, lambda c: None) == []
    cuda = _plan(problem, arch_target("sm_90a"))
    assert setup.shipped_default(cuda, lambda c: "rejected") == []
    assert setup.shipped_default(cuda, lambda c: None) != []
