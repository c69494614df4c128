"""Provides `render_html`: one self-contained HTML page (inline CSS and SVG, no script, no URL)."""

from __future__ import annotations

import html
import time
from collections.abc import Sequence

from pitstop.analysis import Finding
from pitstop.analysis import format as fmt
from pitstop.report._charts import charts
from pitstop.report._data import ReportData, TableRow, overview
from pitstop.report._job import headline

# Inline on purpose: a shared report must look the same offline, in a mail
# attachment or a CI artifact viewer, with nothing fetched.
_CSS = """
body{font-family:sans-serif;max-width:960px;margin:1.5em auto;padding:0 1em;color:#222;line-height:1.4}
h1{font-size:1.5em;margin-bottom:.2em} h2{font-size:1.2em;margin-top:1.8em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.5em 0;font-size:.92em} td,th{padding:2px 10px 2px 0;text-align:left;vertical-align:top}
th{border-bottom:1px solid #ccc} td.num{text-align:right;font-variant-numeric:tabular-nums}
pre{background:#f6f6f6;padding:.6em;overflow-x:auto;font-size:.9em}
.sev{display:inline-block;padding:0 .5em;border-radius:3px;color:#fff;font-size:.85em}
.high{background:#b00020}.medium{background:#c77700}.low{background:#52728f}
.finding{border-left:3px solid #ddd;padding-left:.8em;margin:1em 0} .muted{color:#666}
svg.chart{display:block;margin:.8em 0;max-width:100%;height:auto}
"""


def _e(text: object) -> str:
    return html.escape(str(text))


def _kv(rows: Sequence[tuple[str, str]]) -> str:
    return "<table>" + "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows) + "</table>"


def _finding(f: Finding) -> str:
    parts = [f'<div class="finding"><p><span class="sev {_e(f.severity)}">{_e(f.severity)}</span> '
             f"<b>{_e(f.title)}</b> <span class=\"muted\">({_e(f.rule)})</span></p>"]
    if f.evidence:
        parts.append("<ul>" + "".join(f"<li>{_e(line)}</li>" for line in f.evidence) + "</ul>")
    if f.cause:
        parts.append(f"<p><b>Cause:</b> {_e(f.cause)}</p>")
    if f.gain:
        parts.append(f"<p><b>Gain:</b> {_e(f.gain)}</p>")
    if f.fix:
        parts.append(f"<p><b>Fix:</b></p><pre>{_e(f.fix)}</pre>")
    if f.tune:
        parts.append(f'<p class="muted">confirm with <code>{_e(f.tune)}</code></p>')
    parts.append("</div>")
    return "".join(parts)


def _table(rows: Sequence[TableRow], what: str) -> str:
    if not rows:
        return f'<p class="muted">no {_e(what)} in the windows</p>'
    head = "<tr><th>name</th><th>calls/step</th><th>ms/step</th><th>share of step</th></tr>"
    body = "".join(
        f"<tr><td>{_e(r.name)}</td><td class=num>{r.calls:.1f}</td><td class=num>{r.ms:.2f}</td>"
        f"<td class=num>{fmt.pct(r.share)}</td></tr>" for r in rows)
    return f"<table>{head}{body}</table>"


def _ranks(data: ReportData) -> str:
    job = data.job
    if job is None:
        return ""
    head = ("<tr><th>rank</th><th>host</th><th>status</th><th>steps</th><th>step p50</th><th>data wait</th>"
            "<th>peak memory</th><th>gpu</th></tr>")
    body = "".join(
        f"<tr><td>{_e(r.label)}</td><td>{_e(r.host or '?')}</td><td>{_e(r.status)}</td>"
        f"<td class=num>{r.steps}</td><td class=num>{fmt.duration(r.step_p50_s)}</td>"
        f"<td class=num>{fmt.pct(r.data_wait_frac)}</td>"
        f"<td class=num>{fmt.size(r.peak_mem_allocated if r.peak_mem_allocated is not None else r.peak_rss)}</td>"
        f"<td class=num>{fmt.percent(r.gpu_util_mean)}</td></tr>"
        for r in job.rows)
    stragglers = "".join(f"<li>{_e(s.text)}</li>" for s in job.stragglers) or "<li>none</li>"
    return f"<h2>Ranks</h2><table>{head}{body}</table><p>Stragglers:</p><ul>{stragglers}</ul>"


def render_html(data: ReportData) -> str:
    """The whole page."""
    found = "".join(_finding(f) for f in data.found) or "<p>none: nothing in this run crossed a threshold</p>"
    loaders = "".join(
        f"<tr><td>{_e(r.role)}</td><td>{_e(r.settings)}</td>"
        f"<td class=num>{f'{r.workers_cores:.2f}' if r.workers_cores is not None else 'n/a'}</td></tr>"
        for r in data.loaders)
    loaders_html = (f"<table><tr><th>role</th><th>settings</th><th>workers' CPU (cores)</th></tr>{loaders}</table>"
                    if loaders else '<p class="muted">no torch DataLoader seen</p>')
    windows = ("<ul>" + "".join(f"<li>{_e(w)}</li>" for w in data.windows) + "</ul>" if data.windows
               else '<p class="muted">no profiler window in this record (pitstop run --profile, or p in the viewer)</p>')
    generated = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(data.generated))
    notes = "".join(f"<li>{_e(n)}</li>" for n in data.notes)
    title, of = data.script, ""
    if data.job is not None:
        title, of = f"{data.script}, a job of {data.job.ranks} ranks", f" of {data.primary_label}"
    return "\n".join([
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>pitstop report: {_e(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>pitstop report: {_e(title)}</h1>",
        f'<p class="muted">record {_e(data.path)}, written {_e(generated)} by pitstop report</p>',
        *(["<h2>Job</h2>", _kv(headline(data.job))] if data.job is not None else []),
        f"<h2>Summary{_e(of)}</h2>", _kv(overview(data)),
        "<h2>Charts</h2>", *charts(data),
        f"<h2>Findings ({len(data.found)})</h2>", found,
        f"<h2>DataLoaders{_e(of)}</h2>", loaders_html,
        f"<h2>Profiler windows{_e(of)}</h2>", windows,
        "<h3>Top ops (per profiled step, averaged over the windows)</h3>", _table(data.ops, "ops"),
        "<h3>CUDA kernels</h3>", _table(data.kernels, "CUDA kernels"),
        _ranks(data),
        f"<h2>Environment{_e(of)}</h2>", _kv(data.environment),
        "<h2>pitstop's overhead</h2>", _kv(data.overhead),
        f"<h2>Notes</h2><ul>{notes}</ul>" if notes else "",
        "</body></html>",
    ]) + "\n"
