"""The op registry and the interface every op declares: names, errors that name what there is, options resolved
from one declaration."""

from __future__ import annotations

import pytest

from tracea_cli.errors import UsageError
from tracea_cli.ops.base import Option, epilogues, resolve_options
from tracea_cli.ops.registry import BUILTIN, get_op, op_names


def test_unknown_ops_are_usage_errors_naming_the_available_ones():
    with pytest.raises(UsageError) as e:
        get_op("nosuchop")
    assert "nosuchop" in e.value.message and "gemm" in e.value.hint


def test_every_builtin_op_is_what_its_name_says_and_declares_the_interface():
    assert set(BUILTIN) <= set(op_names())
    for name in BUILTIN:
        op = get_op(name)
        assert op.name == name and op.summary and op.options and op.families and op.dtypes
        assert any(o.name == "dtype" for o in op.options) and any(o.size for o in op.options)
        assert [e.code for e in op.epilogues] == list(range(len(op.epilogues)))
        for backend, dtypes in op.dtypes.items():
            assert dtypes and any(f.backend == backend for f in op.families)
        assert all(set(b.backends) <= set(op.dtypes) for b in op.baselines)


OPTIONS = (Option("m", int, "Rows.", required=True, size=True), Option("n", int, "Columns.", default_from="m", size=True),
           Option("mode", str, "a | b.", default="a", choices=("a", "b")))


def test_options_take_their_defaults_and_their_own_default_from_another():
    assert resolve_options("op", OPTIONS, {"m": 4}) == {"m": 4, "n": 4, "mode": "a"}
    assert resolve_options("op", OPTIONS, {"m": 4, "n": 2, "mode": "b"}) == {"m": 4, "n": 2, "mode": "b"}


@pytest.mark.parametrize("values,says", [({}, "needs m"), ({"m": 4, "h": 2}, "no option 'h'"),
                                          ({"m": 4, "mode": "c"}, "unknown mode 'c'")])
def test_bad_option_values_are_one_sentence(values, says):
    with pytest.raises(UsageError) as e:
        resolve_options("op", OPTIONS, values)
    assert says in e.value.message
    if "mode" in values:
        assert e.value.hint == "Use one of a, b."


def test_epilogues_are_named_by_their_parts_in_order():
    e = {x.name: x for x in epilogues("none", "bias", "bias_relu", "bias_residual", "bias_residual_relu")}
    assert (e["none"].bias, e["none"].activation, e["none"].residual) == (False, None, False)
    assert (e["bias_relu"].bias, e["bias_relu"].activation, e["bias_relu"].post_activation) == (True, "relu", None)
    assert (e["bias_residual_relu"].activation, e["bias_residual_relu"].post_activation) == (None, "relu")
    assert e["bias_relu"].template_name == "BiasRelu" and e["none"].template_name == "None"
    assert [x.code for x in e.values()] == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError):
        epilogues("none", "bias_tanh")


def test_an_option_is_typed_back_as_its_flag_and_a_switch_as_one_word():
    assert Option("d_in", int, "Columns.").argument(4096) == "--d-in 4096"
    switch = Option("bias", bool, "Add a bias.", default=True)
    assert (switch.argument(True), switch.argument(False)) == ("--bias", "--no-bias")
