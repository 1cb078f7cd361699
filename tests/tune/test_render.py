"""The tune table at a fixed width: every figure present, nothing cut, % of peak from the measured ceiling."""

from rich.console import Console

from tracea_cli.tune.driver import Failure, Measured, TuneResult
from tracea_cli.tune.render import render_tune

CONFIG = {"family": "wgmma", "tile_m": 128, "tile_n": 256, "stages": 3, "consumers": 2, "schedule": "cooperative",
          "cluster_m": 1, "persistent": 1, "group_m": 8, "store": "tma"}


def test_table_fits_80_columns_and_shows_every_figure():
    winner = Measured(CONFIG, 0.1813, 0.004, (0.1813,), 758.2, "TFLOP/s")
    base = Measured({}, 0.1790, 0.003, (0.1790,), 767.9, "TFLOP/s")
    result = TuneResult(key="abc123", cache_hit=False, evaluations=22, trials_total=22, winner=winner,
                        baseline_name="cublas", baseline=base, ranking=(winner,),
                        failures=(Failure({"x": 1}, "timeout", "no result within 60 s"),),
                        target={"device_class": "NVIDIA H200"}, stopped_because="converged", space_size=86396,
                        problem={"m": 4096, "n": 4096, "k": 4096, "dtype": "bf16", "layout": "nn"}, peak_flops=769e12,
                        per_device={"0": 12, "1": 10})
    console = Console(width=80, record=True, no_color=True)
    render_tune(result, console)
    text = console.export_text()
    # Configurations are printed whole, one per line (copyable JSON, soft-wrapped by the terminal); the rest fits.
    assert all(len(line) <= 80 for line in text.splitlines() if not line.lstrip().startswith("1: {"))
    for figure in ("0.1813", "758.20", "99%", "0.99x", "cublas", "timeout", "86396", '"tile_n":256', "GPU 0: 12, GPU 1: 10"):
        assert figure in text, figure
    assert result.as_dict()["winner_pct_of_peak"] == 100.0 * 758.2e12 / 769e12


def test_a_busy_run_and_a_rate_above_the_ceiling_are_flagged_not_printed_as_facts():
    from tracea_cli.host_load import HostBusy

    a = Measured(CONFIG, 15.70, 0.02, (15.70,), 1.10, "GFLOP/s")
    b = Measured({**CONFIG, "tile_m": 64}, 15.75, 0.02, (15.75,), 1.09, "GFLOP/s")
    numpy = Measured({}, 9.0, 0.01, (9.0,), 1.9, "GFLOP/s")
    result = TuneResult(key="k", cache_hit=False, evaluations=8, trials_total=8, winner=a, baseline_name="numpy",
                        baseline=numpy, ranking=(a, b), target={"device_class": "cpu"}, stopped_because="budget",
                        problem={"op": "gemm"}, peak_flops=1.2e9, load=HostBusy(30.0, 2, 1.6, 0.0, 3.9, 4.2))
    assert result.pct_of_peak(numpy) is None and result.pct_of_peak(a) == 100.0 * 1.10 / 1.2
    warnings = result.as_dict()["warnings"]
    assert any("busy" in w and "1.6 of 2" in w for w in warnings)
    assert any("within noise" in w for w in warnings) and any("faster than the ceiling" in w for w in warnings)
    console = Console(width=100, record=True, no_color=True)
    render_tune(result, console)
    assert "warning" in console.export_text() and "190%" not in console.export_text()
    quiet = TuneResult(key="k", cache_hit=False, evaluations=8, trials_total=8, winner=a, baseline_name=None,
                       baseline=None, ranking=(a,), load=HostBusy(30.0, 2, 0.0, 0.0))
    assert quiet.warnings == ()


def test_an_fp32_gpu_run_says_where_its_ceiling_comes_from():
    from types import SimpleNamespace

    from tracea_cli.doctor.ceilings import ceiling_from_profile
    from tracea_cli.doctor.profile import Measurement

    def measured(dtype, tflops):
        return Measurement(device="cuda:0", metric="gemm_flops", unit="TFLOP/s", median=tflops, cv=0.01, n=10,
                           q1=tflops, q3=tflops, dtype=dtype, created="2026-12-07T00:00:00Z")

    profile = SimpleNamespace(measured_created="2026-12-07T00:00:00Z", measured=(measured("fp32", 50.0),
                                                                                measured("tf32", 360.0)))
    winner = Measured({"family": "mma"}, 0.29, 0.001, (0.29,), 59.3, "TFLOP/s")

    def text(backend):
        peak = ceiling_from_profile(profile, backend=backend, dtype="fp32")
        result = TuneResult(key="k", cache_hit=False, evaluations=1, trials_total=1, winner=winner, ranking=(winner,),
                            baseline_name=None, baseline=None,
                            target={"device_class": "NVIDIA H100", "backend": backend}, stopped_because="budget",
                            problem={"m": 2048, "n": 2048, "k": 2048, "dtype": "fp32"}, peak_flops=peak.flops_per_s,
                            peak_source=peak.flops_source)
        assert result.as_dict()["peak_source"] == peak.flops_source
        console = Console(width=250, record=True, no_color=True)
        render_tune(result, console)
        return console.export_text()

    cuda = text("cuda")  # tf32's 360 / 3 = 120 > fp32's own 50: the 3xTF32 figure, and the text says so
    assert "120.0 TFLOP/s" in cuda and "/ 3: fp32 as 3 tf32 products" in cuda


def test_a_run_without_a_measured_ceiling_says_why_the_column_is_empty():
    from types import SimpleNamespace

    from tracea_cli.doctor.ceilings import ceiling_from_profile

    peak = ceiling_from_profile(SimpleNamespace(measured_created=None, measured=()), backend="cpu", dtype="fp32")
    winner = Measured({"mr": 8}, 0.19, 0.01, (0.19,), 175.0, "GFLOP/s")
    result = TuneResult(key="k", cache_hit=False, evaluations=1, trials_total=1, winner=winner, ranking=(winner,),
                        baseline_name=None, baseline=None, target={"backend": "cpu"}, stopped_because="budget",
                        problem={"m": 256, "n": 256, "k": 256, "dtype": "fp32"}, peak_flops=peak.flops_per_s,
                        peak_source=peak.flops_source)
    console = Console(width=250, record=True, no_color=True)
    render_tune(result, console)
    text = console.export_text()
    assert peak.flops_per_s is None and "% of peak: none: no fp32 gemm_flops on cpu" in text
    assert "`tracea doctor` (without --quick) measures it" in text
