"""Reports rendered from one set of benchmark results: terminal (rich), JSON, CSV, Markdown and offline HTML.

`render(fmt, results)` returns a file report's text; the terminal report prints to a console (`terminal`).
"""

from __future__ import annotations

from tracea_cli.errors import UsageError

FORMATS = ("terminal", "json", "csv", "md", "html")
FILE_FORMATS = ("json", "csv", "md", "html")
EXTENSIONS = {"json": "json", "csv": "csv", "md": "md", "html": "html"}


def check_formats(formats: list[str]) -> tuple[str, ...]:
    """The requested formats in order, without repeats; an unknown one is a usage error."""
    out: list[str] = []
    for f in formats:
        name = f.strip().lower()
        if name == "markdown":
            name = "md"
        if name not in FORMATS:
            raise UsageError(f"unknown report format {f!r}.", f"Use one of {', '.join(FORMATS)} (--report may be repeated).")
        if name not in out:
            out.append(name)
    return tuple(out)


def render(fmt: str, results, *, json_file: str | None = None) -> str:
    """The text of a file report in format `fmt` (json, csv, md or html). `json_file`: the JSON report written beside
    it, which the HTML report names as the home of the raw samples (None: none was written)."""
    if fmt == "json":
        from tracea_cli.report.json_report import render_json

        return render_json(results)
    if fmt == "csv":
        from tracea_cli.report.csv_report import render_csv

        return render_csv(results)
    if fmt == "md":
        from tracea_cli.report.markdown import render_markdown

        return render_markdown(results)
    if fmt == "html":
        from tracea_cli.report.html import render_html

        return render_html(results, json_file=json_file)
    raise UsageError(f"{fmt!r} is not a file report format.", f"Use one of {', '.join(FILE_FORMATS)}.")
