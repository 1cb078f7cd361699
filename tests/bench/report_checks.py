"""Checks shared by the report tests: the HTML parses, names no external resource, and its charts plot the JSON's values."""

from __future__ import annotations

import json
import math
import re
from html.parser import HTMLParser

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class Parsed(HTMLParser):
    """Parses the report, checks that every element is closed in order, and collects chart data and mark titles."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.tags: list[tuple[str, dict]] = []
        self.chart_data: dict[str, dict] = {}
        self.titles: dict[str, list[str]] = {}  # chart name -> <title> texts of its marks
        self.text: list[str] = []
        self._chart: str | None = None
        self._capture: str | None = None
        self._buf: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        if tag in VOID:
            return
        self.stack.append(tag)
        if tag == "svg":
            self._chart = None
        if tag == "metadata" and a.get("class") == "tracea-chart-data":
            self._chart = a["data-chart"]
            self._capture, self._buf = "data", []
        elif tag == "title" and "svg" in self.stack:
            self._capture, self._buf = "title", []

    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1] if self.stack else 'nothing'}")
            return
        self.stack.pop()
        if tag == "metadata" and self._capture == "data":
            self.chart_data[self._chart] = json.loads("".join(self._buf))
            self._capture = None
        elif tag == "title" and self._capture == "title":
            self.titles.setdefault(self._chart or "?", []).append("".join(self._buf))
            self._capture = None

    def handle_data(self, data):
        if self._capture:
            self._buf.append(data)
        self.text.append(data)


def parse_report(html: str) -> Parsed:
    p = Parsed()
    p.feed(html)
    p.close()
    assert not p.errors, p.errors[:5]
    assert not p.stack, f"unclosed: {p.stack}"
    assert html.lstrip().lower().startswith("<!doctype html>")
    return p


def assert_self_contained(html: str, parsed: Parsed) -> None:
    """No URL at all (not even SVG namespace URLs), no script, no external stylesheet, image or font."""
    assert not re.search(r"(https?:)?//[a-z0-9]", html, flags=re.I), re.search(r".{40}(https?:)?//[a-z0-9].{40}", html, flags=re.I)
    for tag, attrs in parsed.tags:
        assert tag not in ("script", "link", "iframe", "img", "object", "embed"), tag
        for name in ("src", "href", "xlink:href"):
            value = attrs.get(name)
            assert value is None or value.startswith("#"), (tag, name, value)
    assert "@import" not in html and "url(http" not in html


def close(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=1e-12, abs_tol=0.0)


def assert_charts_match_json(parsed: Parsed, doc: dict) -> None:
    """Every value the speed-up, roofline and convergence charts plot equals the JSON report's."""
    rows = {(r["problem"], r["provider"]): r for r in doc["results"]}
    tuned = {r["problem"]: r for r in doc["results"] if r["kind"] == "tuned" and r["speedup"] is not None}
    speed = parsed.chart_data["speedup"]
    assert [m["problem"] for m in speed["marks"]] == list(tuned)
    for m in speed["marks"]:
        s = tuned[m["problem"]]["speedup"]
        assert (m["estimate"], m["low"], m["high"]) == (s["estimate"], s["low"], s["high"])
        assert m["over"] == tuned[m["problem"]]["speedup_over"] and m["over"] in speed["over"]
    assert len(parsed.titles["speedup"]) == len(speed["marks"])
    for title, m in zip(parsed.titles["speedup"], speed["marks"]):
        assert title.startswith(m["problem"]) and f"{m['estimate']:.3f}×" in title

    roof = parsed.chart_data["roofline"]
    measured = [r for r in doc["results"] if r["status"] == "ok"]
    assert len(roof["marks"]) == len(measured)
    for m in roof["marks"]:
        r = rows[(m["problem"], m["provider"])]
        assert m["flops_per_s"] == r["flops_per_s"]
        assert close(m["intensity"], r["flops"] / r["bytes"])
    problems = {p["problem"]: p for p in doc["problems"]}
    for c in roof["ceilings"]:
        p = next(p for p in doc["problems"] if p["spec"]["dtype"] == c["dtype"])
        assert c["flops_per_s"] == p["ceiling"]["flops_per_s"] and c["bytes_per_s"] == p["ceiling"]["bytes_per_s"]
    assert len(parsed.titles["roofline"]) == len(roof["marks"])

    conv = {name: d for name, d in parsed.chart_data.items() if name.startswith("convergence-")}
    with_trials = [p for p in doc["problems"] if p["tuning"] and p["tuning"]["trials"]]
    assert len(conv) == len(with_trials)
    for d in conv.values():
        trials = problems[d["problem"]]["tuning"]["trials"]
        assert [(t["index"], t["median_ms"], t["status"]) for t in d["trials"]] == [(t["index"], t["median_ms"], t["status"]) for t in trials]
        best, expected = None, []
        for t in trials:
            if t["median_ms"] is not None:
                best = t["median_ms"] if best is None else min(best, t["median_ms"])
            expected.append(best)
        assert d["best_so_far_ms"] == expected
