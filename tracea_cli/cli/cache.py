"""`tracea cache ls | show KEY | export FILE | import FILE | clear | prune`: look after the tuning cache."""

from __future__ import annotations

import dataclasses
import statistics
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Optional

import typer

from tracea_cli.cli.output import print_json, stderr_console, stdout_console
from tracea_cli.errors import UsageError
from tracea_cli.text import config_text, counted

CacheOption = typer.Option(None, "--cache", metavar="DIR", help="Cache folder (default: TRACEA_CACHE_DIR or the user cache folder).")
JsonOption = typer.Option(False, "--json", help="Print the result as JSON on stdout.")

cache_app = typer.Typer(
    name="cache",
    help="List, inspect, share (export/import), prune and clear the tuning cache.",
    no_args_is_help=True,
)


def register(app: typer.Typer) -> None:
    app.add_typer(cache_app, name="cache")


# ---- shared -----------------------------------------------------------------------------------------------------


def _cache_path(cache_dir: Optional[Path]) -> Path:
    """The cache file chosen by --cache, else by the settings (TRACEA_CACHE_DIR or the user cache folder)."""
    from tracea_cli.config import Settings

    settings = Settings.from_env()
    if cache_dir is not None:
        settings = dataclasses.replace(settings, cache_dir=Path(cache_dir).expanduser())
    folder = settings.cache_path.parent
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"the cache folder {folder} is a file, not a folder.",
                         f"Give --cache the folder that holds {settings.cache_path.name}, not a file.")
    return settings.cache_path


def _open(cache_dir: Optional[Path], *, create: bool = True):
    """The cache, with its warnings printed on stderr. Commands that only read it do not create it (`create`)."""
    from tracea_cli.cache import TuningCache

    path = _cache_path(cache_dir)
    if not create and not path.exists():
        raise UsageError(f"there is no tuning cache at {path} yet.", "`tracea tune` makes it; or give --cache DIR.")
    cache = TuningCache.open(path)
    err = stderr_console()
    for w in cache.warnings:
        err.print(f"warning: {w}")
    cache.on_warning = lambda w: err.print(f"warning: {w}")
    return cache



def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


WIDE_LS = 120  # narrower terminals get the problem and device class below the table, not in it

# ---- ls ---------------------------------------------------------------------------------------------------------


@cache_app.command("ls")
def ls(cache_dir: Optional[Path] = CacheOption, as_json: bool = JsonOption) -> None:
    """List the cached keys: id, problem, backend, device class, trials and the winner's time."""
    path = _cache_path(cache_dir)
    rows = []
    if path.exists():
        with _open(cache_dir) as cache:
            rows = cache.summaries()
    if as_json:
        print_json({"cache": str(path), "keys": [r.as_dict() for r in rows]})
        return
    if not rows:
        stderr_console().print(f"The tuning cache {path} is empty. `tracea tune` fills it.")
        return
    from rich.table import Table

    console = stdout_console()
    wide = console.width >= WIDE_LS
    table = Table(title=f"{counted(len(rows), 'key')} in {path}", title_justify="left")
    table.add_column("id", no_wrap=True)
    for name in ("op", "shape", "dtype") + (("problem",) if wide else ()) + ("backend",) + (("device class",) if wide else ()):
        table.add_column(name, overflow="fold", min_width=len(name))
    table.add_column("trials", justify="right", min_width=6)
    table.add_column("winner ms", justify="right", no_wrap=True)
    details = []
    for r in rows:
        k = r.key
        trials = f"{r.trials}" + (f" ({r.failed} failed)" if r.failed else "")
        variant = " ".join(f"{name}={value}" for name, value in k.variant.items())
        cells = [k.id, k.op, k.shape_text, k.dtype] + ([variant] if wide else []) + [k.backend] \
            + ([k.device_class] if wide else []) + [trials, _ms(r.winner_ms)]
        table.add_row(*cells)
        details.append(f"  {k.id}  {variant or '-'} · {k.device_class}")
    console.print(table)
    if not wide:  # the long columns, one line per key below a table that fits the terminal
        console.print("problem · device class:")
        for line in details:
            console.print(line, soft_wrap=False, overflow="fold")


# ---- show -------------------------------------------------------------------------------------------------------


def _statistics(trials: list) -> dict[str, Any]:
    ok = [t for t in trials if t.ok and t.median_ms is not None]
    medians = [t.median_ms for t in ok]
    return {
        "trials": len(trials),
        "ok": len(ok),
        "failed": dict(Counter(t.status for t in trials if not t.ok)),
        "fastest_ms": min(medians) if medians else None,
        "median_of_medians_ms": statistics.median(medians) if medians else None,
        "slowest_ms": max(medians) if medians else None,
        "compile_s_total": sum(t.compile_s for t in trials),
        "first": min((t.timestamp for t in trials), default=None),
        "last": max((t.timestamp for t in trials), default=None),
    }


@cache_app.command("show")
def show(
    key_id: str = typer.Argument(..., metavar="KEY", help="A key id from `tracea cache ls` (any unique prefix)."),
    cache_dir: Optional[Path] = CacheOption,
    as_json: bool = JsonOption,
) -> None:
    """Show one key: its fields, search state, winner, trial statistics and failures."""
    from tracea_cli.cache.records import iso_time

    with _open(cache_dir, create=False) as cache:
        key = cache.resolve(key_id)
        trials = cache.trials(key)
        winner = cache.winner(key)
        search = cache.search_state(key)
    stats = _statistics(trials)
    failures = [t for t in trials if not t.ok]
    if as_json:
        stats_json = {**stats, "first": stats["first"] and iso_time(stats["first"]), "last": stats["last"] and iso_time(stats["last"])}
        print_json({
            "key": key.as_dict(),
            "bucket": key.bucket,
            "search": search.as_dict() if search else None,
            "winner": winner.as_dict() if winner else None,
            "statistics": stats_json,
            "failures": [{"config": dict(t.config), "status": t.status, "reason": t.reason} for t in failures],
            "trials": [t.as_dict() for t in trials],
        })
        return
    from rich.table import Table

    out = stdout_console()
    fields = Table.grid(padding=(0, 2))
    fields.add_column(style="bold")
    fields.add_column(overflow="fold")
    for name, value in key.as_dict().items():
        if isinstance(value, dict):
            value = ", ".join(f"{k}={v}" for k, v in value.items()) or "-"
        fields.add_row(name, "-" if value is None else str(value))
    fields.add_row("bucket (log2)", ", ".join(f"{k}={v}" for k, v in key.bucket.items()))
    if search:
        fields.add_row("search", f"{search.strategy}, {search.evaluations} evaluations of a budget of {search.budget}"
                       + (", converged" if search.converged else "") + f", updated {iso_time(search.updated)}")
    else:
        fields.add_row("search", "none recorded")
    if winner:
        fields.add_row("winner", f"{_ms(winner.median_ms)} ms (cv {winner.cv or 0:.1%}, {len(winner.samples_ms)} samples)")
        fields.add_row("winner config", config_text(dict(winner.config)))
    else:
        fields.add_row("winner", "none")
    failed = ", ".join(f"{n} {s}" for s, n in stats["failed"].items()) or "none"
    fields.add_row("trials", f"{stats['trials']} ({stats['ok']} correct; failed: {failed})")
    if stats["ok"]:
        fields.add_row("trial times", f"fastest {_ms(stats['fastest_ms'])} ms, median {_ms(stats['median_of_medians_ms'])} ms, "
                       f"slowest {_ms(stats['slowest_ms'])} ms")
    fields.add_row("compile time", f"{stats['compile_s_total']:.2f} s in all")
    out.print(fields)
    if failures:
        table = Table(title="failures", title_justify="left")
        table.add_column("config", overflow="fold")
        table.add_column("status")
        table.add_column("reason", overflow="fold")
        for t in failures:
            reason = t.reason if len(t.reason) <= 200 else t.reason[:197] + "..."
            table.add_row(config_text(dict(t.config)), t.status, reason)
        out.print(table)


# ---- export / import --------------------------------------------------------------------------------------------


@cache_app.command("export")
def export(
    file: Path = typer.Argument(..., metavar="FILE", help="JSON file to write (docs/cache-format.md)."),
    key_ids: Optional[list[str]] = typer.Option(None, "--key", metavar="KEY", help="Export only this key (repeatable)."),
    cache_dir: Optional[Path] = CacheOption,
    as_json: bool = JsonOption,
) -> None:
    """Write keys, trials, winners and search state to a JSON file to share (configurations and times, no binaries)."""
    with _open(cache_dir, create=False) as cache:
        keys = [cache.resolve(k) for k in key_ids] if key_ids else None
        data = cache.export_data(keys)
    from tracea_cli.files import write_json_atomic

    write_json_atomic(file, data, "cache export")
    trials = sum(len(e["trials"]) for e in data["entries"])
    if as_json:
        print_json({"path": str(file), "entries": len(data["entries"]), "trials": trials})
    else:
        stderr_console().print(f"Exported {counted(len(data['entries']), 'key')} ({counted(trials, 'trial')}) to {file}.")


@cache_app.command("import")
def import_(
    file: Path = typer.Argument(..., metavar="FILE", help="A file written by `tracea cache export`."),
    cache_dir: Optional[Path] = CacheOption,
    as_json: bool = JsonOption,
) -> None:
    """Merge an export file into the cache. Every configuration is checked against the op's search space first;
    any invalid entry refuses the whole import."""
    from tracea_cli.backends.op_backend import config_validator

    with _open(cache_dir) as cache:
        report = cache.import_(file, config_validator())
    if as_json:
        print_json({"path": str(file), **report.as_dict()})
    else:
        stderr_console().print(
            f"Imported {counted(report.entries, 'key')} from {file}: {report.keys_added} new, {report.keys_merged} merged; "
            f"{counted(report.trials_added, 'trial')} added ({report.trials_skipped} already present); "
            f"{counted(report.winners_set, 'winner')} set."
        )


# ---- clear / prune ----------------------------------------------------------------------------------------------


@cache_app.command("clear")
def clear(
    yes: bool = typer.Option(False, "--yes", help="Confirm: remove every key, trial and winner."),
    cache_dir: Optional[Path] = CacheOption,
    as_json: bool = JsonOption,
) -> None:
    """Remove everything from the cache (needs --yes)."""
    with _open(cache_dir, create=False) as cache:
        if not yes:
            n = len(cache.keys())
            raise UsageError(
                f"clearing the cache removes {counted(n, 'key')} with their trials, and needs --yes.",
                "Run `tracea cache clear --yes`, or `tracea cache export FILE` first to keep a copy.",
            )
        removed = cache.clear()
        path = cache.path
    if as_json:
        print_json({"cache": str(path), "keys_removed": removed})
    else:
        stderr_console().print(f"Removed {counted(removed, 'key')} from {path}.")


def _source_checker(notes: list[str]) -> Callable:
    """is_current(key): asks the code that made the key (tune.setup.key_is_current). Keys it cannot ask about (an
    op or backend this installation lacks) are kept, with a note."""
    from tracea_cli.errors import TraceaError
    from tracea_cli.tune.setup import key_is_current

    noted: set[tuple[str, str]] = set()

    def is_current(key) -> bool:
        try:
            return key_is_current(key)
        except (ImportError, OSError, TraceaError) as e:
            if (key.op, key.backend) not in noted:
                noted.add((key.op, key.backend))
                reason = e.message if isinstance(e, TraceaError) else str(e)
                notes.append(f"kept the {key.op} keys of the {key.backend} backend: cannot hash its current kernel "
                             f"sources ({reason.rstrip('.')}).")
            return True

    return is_current


@cache_app.command("prune")
def prune(
    older_than: Optional[float] = typer.Option(None, "--older-than", metavar="DAYS", min=0, help="Also remove keys not updated for DAYS days."),
    failed: bool = typer.Option(False, "--failed", help="Remove failed trials (older than DAYS with --older-than) so they are tried again."),
    keep_stale: bool = typer.Option(False, "--keep-stale", help="Keep keys whose kernel source hash is no longer current."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Count what would be removed; remove nothing."),
    cache_dir: Optional[Path] = CacheOption,
    as_json: bool = JsonOption,
) -> None:
    """Remove keys that can never be hit again (older key schema, kernel sources changed), and optionally old keys
    and failed trials."""
    notes: list[str] = []
    with _open(cache_dir, create=False) as cache:
        report = cache.prune(
            older_than_days=older_than,
            keep_failed=not failed,
            is_current=None if keep_stale else _source_checker(notes),
            dry_run=dry_run,
        )
        path = cache.path
    err = stderr_console()
    for n in notes:
        err.print(f"note: {n}")
    if as_json:
        print_json({"cache": str(path), **report.as_dict(), "notes": notes})
    else:
        verb = "Would remove" if dry_run else "Removed"
        err.print(f"{verb} {counted(report.keys_removed, 'key')} and {counted(report.trials_removed, 'trial')} from {path}.")
