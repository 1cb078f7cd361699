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
