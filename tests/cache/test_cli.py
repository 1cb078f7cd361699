"""`tracea cache ...` through typer's test runner: output, --json, exit codes, one-sentence errors."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tracea_cli.cache import TuningCache
from tracea_cli.cli import app


@pytest.fixture
def run(tmp_path):
    env = {"TRACEA_CACHE_DIR": str(tmp_path / "cache"), "TRACEA_DATA_DIR": str(tmp_path / "data"), "COLUMNS": "160",
           "NO_COLOR": "1"}

    def invoke(*args: str):
        result = CliRunner().invoke(app, ["cache", *args], env=env)
        assert "Traceback" not in result.output, result.output
        return result

    return invoke


@pytest.fixture
def filled(tmp_path, mk_key, mk_trial):
    """A CPU key with three trials of real CPU configurations (one timed out) and a winner, and a CUDA key with one
    trial of a real mma configuration."""
    with TuningCache.open(tmp_path / "cache" / "tuning.sqlite3") as cache:
        a, b = mk_key(1024), mk_key(512, backend="cuda", device_class="NVIDIA H200", arch="sm_90", dtype="bf16")
        cache.record_trial(a, mk_trial(config=cpu_config(4), median_ms=2.0))
        cache.record_trial(a, mk_trial(config=cpu_config(6), median_ms=1.5))
        cache.record_trial(a, mk_trial(config=cpu_config(8), status="timeout", reason="ran past 60 s and was stopped"))
        cache.set_winner(a, mk_trial(config=cpu_config(6), median_ms=1.5))
        cache.record_search(a, strategy="bayes", budget=3, evaluations=3, converged=False)
        cache.record_trial(b, mk_trial(config=MMA, median_ms=0.25))
    return a, b


def cpu_config(mr: int) -> dict:
    return {"mr": mr, "nr": 32, "mc": 96, "kc": 256, "nc": 512, "pack_a": True, "parallel": "m", "threads": 2}


MMA = {"family": "mma", "block_m": 128, "block_n": 128, "block_k": 32, "warp_m": 64, "warp_n": 64, "stages": 4,
       "split_k": 1, "group_m": 1, "vec": 8}


def test_ls_lists_keys_as_a_table_and_as_json(run, filled):
    a, b = filled
    table = run("ls")
    assert table.exit_code == 0, table.output
    assert "2 keys in" in table.stdout
    for text in (a.id, b.id, "1024x1024x1024", "NVIDIA H200", "bf16", "3 (1 failed)", "1.5"):
        assert text in table.stdout, text
    listed = run("ls", "--json")
    assert listed.exit_code == 0
    data = json.loads(listed.stdout)
    rows = {r["id"]: r for r in data["keys"]}
    assert rows[a.id]["trials"] == 3 and rows[a.id]["failed"] == 1 and rows[a.id]["winner_ms"] == 1.5
    assert rows[b.id]["winner_ms"] is None and rows[b.id]["sizes"] == {"m": 512, "n": 512, "k": 512}
    assert rows[b.id]["problem"] == {"epilogue": "none", "k": 512, "layout": "nn", "m": 512, "n": 512}


def test_ls_fits_80_columns_with_its_headers_whole(tmp_path, filled):
    env = {"TRACEA_CACHE_DIR": str(tmp_path / "cache"), "TRACEA_DATA_DIR": str(tmp_path / "data"), "COLUMNS": "80",
           "NO_COLOR": "1"}
    out = CliRunner().invoke(app, ["cache", "ls"], env=env).stdout
    lines = out.splitlines()
    assert all(len(line.rstrip()) <= 80 for line in lines)
    header = next(line for line in lines if " id " in line)
    assert all(name in header for name in ("op", "shape", "dtype", "backend", "trials", "winner ms"))
    a, b = filled
    assert "NVIDIA H200" in out and a.id in out and b.id in out  # the long columns below the table


def test_ls_on_an_empty_cache_says_so(run, tmp_path):
    result = run("ls")
    assert result.exit_code == 0 and "is empty" in result.stderr and result.stdout == ""
    assert json.loads(run("ls", "--json").stdout)["keys"] == []
    assert not (tmp_path / "cache").exists()  # looking does not create it


@pytest.mark.parametrize("args", [("show", "abcd"), ("export", "out.json"), ("clear", "--yes"), ("prune",)])
def test_commands_on_a_missing_cache_say_so_and_create_nothing(run, tmp_path, args):
    result = run(*args, "--cache", str(tmp_path / "typo"))
    assert result.exit_code == 2 and "there is no tuning cache at" in result.stderr
    assert not (tmp_path / "typo").exists()


def test_cache_option_overrides_the_environment(run, tmp_path, mk_key, mk_trial):
    elsewhere = tmp_path / "elsewhere"
    with TuningCache.open(elsewhere / "tuning.sqlite3") as cache:
        cache.record_trial(mk_key(64), mk_trial())
    assert json.loads(run("ls", "--json").stdout)["keys"] == []
    data = json.loads(run("ls", "--json", "--cache", str(elsewhere)).stdout)
    assert [r["id"] for r in data["keys"]] == [mk_key(64).id]


def test_show_gives_fields_winner_statistics_and_failures(run, filled):
    a, _ = filled
    shown = run("show", a.id[:6])
    assert shown.exit_code == 0, shown.output
    for text in ("source_hash", "src-1", "bayes, 3 evaluations of a budget of 3", "1.5 ms", "mr=6 nr=32",
                 "3 (2 correct; failed: 1 timeout)", "ran past 60 s", "m=10, n=10, k=10", "layout=nn"):
        assert text in shown.stdout, text
    data = json.loads(run("show", a.id, "--json").stdout)
    assert data["key"]["id"] == a.id and data["winner"]["median_ms"] == 1.5
    assert data["statistics"]["trials"] == 3 and data["statistics"]["failed"] == {"timeout": 1}
    assert data["statistics"]["fastest_ms"] == 1.5
    assert data["failures"] == [{"config": cpu_config(8), "status": "timeout",
                                 "reason": "ran past 60 s and was stopped"}]
    assert len(data["trials"]) == 3 and data["search"]["evaluations"] == 3


@pytest.mark.parametrize("bad", ["nope", "ab", "ffffffffffff"])
def test_show_with_a_bad_key_is_exit_2_with_one_sentence(run, filled, bad):
    result = run("show", bad)
    assert result.exit_code == 2
    assert result.stderr.startswith("error: ") and result.stdout == ""


def test_export_then_import_through_the_cli(run, filled, tmp_path):
    a, b = filled
    out = tmp_path / "team.json"
    exported = run("export", str(out), "--json")
    assert exported.exit_code == 0, exported.output
    assert json.loads(exported.stdout) == {"path": str(out), "entries": 2, "trials": 4}
    one = run("export", str(tmp_path / "one.json"), "--key", b.id)
    assert one.exit_code == 0 and "Exported 1 key (1 trial)" in one.stderr

    other = tmp_path / "other"
    imported = run("import", str(out), "--cache", str(other), "--json")
    assert imported.exit_code == 0, imported.output
    report = json.loads(imported.stdout)
    assert (report["entries"], report["keys_added"], report["trials_added"], report["winners_set"]) == (2, 2, 4, 1)
    with TuningCache.open(other / "tuning.sqlite3") as cache:
        assert cache.winner(a).median_ms == 1.5 and len(cache.trials(b)) == 1


def test_an_import_with_a_value_outside_the_space_is_refused_whole(run, filled, tmp_path):
    out = tmp_path / "team.json"
    run("export", str(out))
    data = json.loads(out.read_text())
    data["entries"].sort(key=lambda e: e["key"]["backend"] == "cuda")  # the CUDA key's entry last
    data["entries"][-1]["trials"][0]["config"]["block_m"] = 4096
    out.write_text(json.dumps(data))
    other = tmp_path / "other"
    result = run("import", str(out), "--cache", str(other))
    assert result.exit_code == 2
    assert "entry 1" in result.stderr and "block_m=4096 is not one of" in result.stderr
    assert "Nothing was imported" in result.stderr
    assert json.loads(run("ls", "--json", "--cache", str(other)).stdout)["keys"] == []


def test_import_of_an_unreadable_file_is_exit_2_naming_it(run, tmp_path):
    result = run("import", str(tmp_path / "absent.json"))
    assert result.exit_code == 2 and "absent.json" in result.stderr


def test_export_to_an_unwritable_place_is_exit_2(run, filled, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    result = run("export", str(blocker / "out.json"))
    assert result.exit_code == 2 and "for the cache export" in result.stderr


def test_clear_needs_yes(run, filled):
    refused = run("clear")
    assert refused.exit_code == 2 and "needs --yes" in refused.stderr
    assert len(json.loads(run("ls", "--json").stdout)["keys"]) == 2
    cleared = run("clear", "--yes", "--json")
    assert cleared.exit_code == 0 and json.loads(cleared.stdout)["keys_removed"] == 2
    assert json.loads(run("ls", "--json").stdout)["keys"] == []


def test_prune_dry_run_then_failed_trials(run, filled):
    a, _ = filled
    dry = run("prune", "--failed", "--dry-run", "--keep-stale", "--json")
    assert dry.exit_code == 0, dry.output
    assert json.loads(dry.stdout) | {"cache": None} == {"cache": None, "keys_removed": 0, "trials_removed": 1,
                                                         "dry_run": True, "notes": []}
    assert json.loads(run("show", a.id, "--json").stdout)["statistics"]["trials"] == 3
    done = run("prune", "--failed", "--keep-stale")
    assert done.exit_code == 0 and "Removed 0 keys and 1 trial" in done.stderr
    assert json.loads(run("show", a.id, "--json").stdout)["statistics"]["failed"] == {}


def test_prune_keeps_keys_whose_sources_cannot_be_hashed_and_says_so(run, tmp_path, mk_key, mk_trial):
    with TuningCache.open(tmp_path / "cache" / "tuning.sqlite3") as cache:  # an op and a backend not installed here
        for key in (mk_key(64, op="conv9d"), mk_key(64, backend="rocm")):
            cache.record_trial(key, mk_trial(config=cpu_config(4)))
    result = run("prune", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["keys_removed"] == 0 and len(data["notes"]) == 2, data
    assert "conv9d" in data["notes"][0] and "rocm" in data["notes"][1]


def test_a_corrupt_cache_is_reported_on_stderr_and_replaced(run, tmp_path):
    folder = tmp_path / "cache"
    folder.mkdir()
    (folder / "tuning.sqlite3").write_bytes(b"\x00 definitely not sqlite " * 40)
    result = run("ls", "--json")
    assert result.exit_code == 0
    assert "warning:" in result.stderr and "moved it to" in result.stderr
    assert json.loads(result.stdout)["keys"] == []


def test_help_lists_the_subcommands(run):
    result = run("--help")
    assert result.exit_code == 0
    for name in ("ls", "show", "export", "import", "clear", "prune"):
        assert name in result.stdout


@pytest.mark.parametrize("args", [["ls"], ["show", "1"], ["export", "out.json"], ["prune", "--dry-run"]])
def test_a_file_given_as_the_cache_folder_is_refused_in_one_sentence(run, tmp_path, args):
    not_a_folder = tmp_path / "results.json"
    not_a_folder.write_text("{}")
    result = run(*args, "--cache", str(not_a_folder))
    assert result.exit_code == 2, result.output
    assert "is a file, not a folder" in result.output
    assert not_a_folder.read_text() == "{}"
