"""Operations, one package each (ops/<op>/): problem, float64 reference, work counts, kernel families, baselines,
bench suite rows and export ABI. `base.py` is the interface every op provides, `launch.py` the typed launch
description its families return, `registry.py` the only list of ops (`get_op(name)`). `dtypes.py` and `verify.py`
are shared: element types, and the correctness policy (relative Frobenius error against float64, a bound per
dtype, NaN never passes)."""
