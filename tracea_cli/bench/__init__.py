"""`tracea bench`: suites of problems, each run as the tuned kernel and its baselines, into results that every
report renders from.

- `suites`: the built-in `quick` and `default` suites and suite files.
- `runner`: `run_bench(BenchRequest, engine)` -> `BenchResults`; the `Engine` protocol is its only way to the machine.
- `engine`: `LiveEngine`, the real engine (tuning driver, cache, backend, capability profile).
- `baselines`: which baselines exist, and the torch one. (The measured ceilings come from doctor/ceilings.py.)
- `results`: the frozen data and its versioned JSON; `compare`: `--compare` decisions.
"""
