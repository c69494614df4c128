"""Provides `render_markdown`: the report as Markdown to paste into an issue (tables, and sparklines for charts)."""

from __future__ import annotations

import time
from collections.abc import Sequence

from pitstop.analysis import SCALE_PCT, above, scale_top
from pitstop.analysis import format as fmt
from pitstop.report._data import ReportData, TableRow, overview
from pitstop.report._job import RankSeries, headline

_SPARKS = "▁▂▃▄▅▆▇█"
CLIP = "▲"  # a cell above the measured scale (as the TUI's bars mark theirs)
# A sparkline of 60 characters fits an issue's code block without wrapping.
SPARK_WIDTH = 60


def cells(values: Sequence[float], width: int = SPARK_WIDTH) -> list[float]:
    """Values squeezed into at most `width` cells: the means of equal slices."""
    n = len(values)
    parts = [values[int(i * n / width): max(int(i * n / width) + 1, int((i + 1) * n / width))]
             for i in range(min(width, n))]
    return [sum(c) / len(c) for c in parts]


def sparkline(values: Sequence[float], width: int = SPARK_WIDTH, top: float | None = None) -> str:
    """Values squeezed into `width` characters (`cells`), scaled from 0 to their max (or to `top`: the
    measured scale, the lines of several ranks on one scale); a cell above `top` is CLIP."""
    if not values:
        return ""
    means = cells(values, width)
    top = max(means) if top is None else top
    if top <= 0:
        return _SPARKS[0] * len(means)
    return "".join(CLIP if m > top * (1 + 1e-9) else _SPARKS[min(7, int(m / top * 7.999))] for m in means)


def time_spark(what: str, values: Sequence[float], top: float | None = None) -> str:
    """`what`'s sparkline of times to the measured scale (`scale_top` of its cells, or `top` shared by
    ranks) and what the scale is; a line of zeros says so in words."""
    if not any(v > 0 for v in values):
        return f"{what}0 at every step"
    drawn = cells(values)
    top = scale_top(drawn) if top is None else top
    cut = above(drawn, top)
    if not cut:
        return f"{what}{sparkline(values, top=top)}  max {fmt.duration(max(values))}"
    return (f"{what}{sparkline(values, top=top)}  scale {fmt.duration(top)} "
            f"(p{SCALE_PCT:.0f}; {CLIP} above it, max {fmt.duration(max(values))})")


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _kv(rows: Sequence[tuple[str, str]]) -> list[str]:
    return ["| | |", "|---|---|"] + [f"| {_cell(k)} | {_cell(v)} |" for k, v in rows]


def _table(rows: Sequence[TableRow]) -> list[str]:
    out = ["| name | calls/step | ms/step | share of step |", "|---|---:|---:|---:|"]
    out += [f"| `{_cell(r.name)}` | {r.calls:.1f} | {r.ms:.2f} | {fmt.pct(r.share)} |"
            for r in rows]
    return out


def _rank_sparks(ranks: Sequence[RankSeries], total: int) -> list[str]:
    """A job's sparklines: each figure a line per rank drawn, the ranks of one figure on one scale,
    so a rank that waits for data stands out against the others."""
    which = "" if len(ranks) == total else f"; {len(ranks)} of {total} ranks drawn"
    out = ["", f"Over the run, per rank (left: start, right: end; each figure's ranks on one scale{which}):", "", "```"]
    width = max(len(r.name) for r in ranks)
    figures = (("step time", lambda r: r.series.steps.points("wall"), fmt.duration),
               ("data wait", lambda r: r.series.steps.points("wait"), fmt.duration),
               ("samples/s", lambda r: r.series.steps.ratio("samples", "wall_known"), lambda v: f"{v:.0f}"),
               ("host rss", lambda r: r.series.steps.points("rss", "max"), fmt.size))
    for what, points, unit in figures:
        values = [[v for _, v in points(r)] for r in ranks]
        top = max((max(v) for v in values if v), default=0.0)
        timed = unit is fmt.duration
        if not top:
            if timed and any(values):
                out.append(f"{what:<10} {'':<{width}}  0 at every step of every rank")
            continue
        if timed:  # one measured scale for the ranks' times: a warm-up step would flatten them all
            top = scale_top([c for v in values for c in cells(v)])
        for i, (r, v) in enumerate(zip(ranks, values)):
            head = f"{what if i == 0 else '':<10} {r.name:<{width}}  "
            if not v:
                out.append(f"{head}not recorded")
            elif timed:
                out.append(time_spark(head, v, top))
            else:
                out.append(f"{head}{sparkline(v, top=top)}  max {unit(max(v))}")
    out.append("```")
    return out


def render_markdown(data: ReportData) -> str:
    """The whole report, GitHub-flavoured Markdown."""
    steps = data.series.steps
    job = f", a job of {data.job.ranks} ranks" if data.job is not None else ""
    lines = [f"## pitstop report: `{data.script}`{job}", "",
             f"record `{data.path}`, written {time.strftime('%Y-%m-%d %H:%M', time.localtime(data.generated))}", ""]
    if data.job is not None:
        lines += [f"A job of {data.job.ranks} ranks:", ""] + _kv(headline(data.job))
        lines += ["", f"### Summary of {data.primary_label}", ""]
    lines += _kv(overview(data))
    wall = [v for _, v in steps.points("wall")]
    if len(data.drawn) > 1:
        lines += _rank_sparks(data.drawn, len(data.runs))
    elif wall:
        wait = [v for _, v in steps.points("wait")]
        rate = [v for _, v in steps.ratio("samples", "wall_known")]
        rss = [v for _, v in steps.points("rss", "max")]
        lines += ["", "Over the run (left: start, right: end; times to their measured scale, the rest to "
                  "its own max):", "", "```"]
        lines.append(time_spark("step time  ", wall))
        if wait:
            lines.append(time_spark("data wait  ", wait))
        if rate:
            lines.append(f"samples/s  {sparkline(rate)}  max {max(rate):.0f}")
        if rss:
            lines.append(f"host rss   {sparkline(rss)}  max {fmt.size(max(rss))}")
        lines.append("```")
    lines += ["", f"### Findings ({len(data.found)})", ""]
    if not data.found:
        lines.append("none: nothing in this run crossed a threshold")
    for f in data.found:
        lines.append(f"**[{f.severity}] {f.title}** (`{f.rule}`)")
        lines += [f"- {e}" for e in f.evidence]
        if f.cause:
            lines.append(f"- cause: {f.cause}")
        if f.gain:
            lines.append(f"- gain: {f.gain}")
        if f.fix:
            lines += ["", "```python", f.fix, "```"]
        if f.tune:
            lines += ["", f"confirm with `{f.tune}`"]
        lines.append("")
    if data.loaders:
        lines += ["### DataLoaders", "", "| role | settings | workers' CPU (cores) |", "|---|---|---:|"]
        lines += [f"| {_cell(r.role)} | {_cell(r.settings)} | "
                  f"{f'{r.workers_cores:.2f}' if r.workers_cores is not None else 'n/a'} |" for r in data.loaders]
        lines.append("")
    if data.windows:
        lines += ["### Profiler windows", ""] + [f"- {w}" for w in data.windows] + [""]
        lines += ["Top ops (per profiled step):", ""] + _table(data.ops[:10]) + [""]
        if data.kernels:
            lines += ["CUDA kernels:", ""] + _table(data.kernels[:10]) + [""]
    if data.job is not None:
        lines += ["### Ranks", "", "| rank | status | steps | step p50 | data wait |", "|---|---|---:|---:|---:|"]
        lines += [f"| {r.label} | {r.status} | {r.steps} | "
                  f"{fmt.duration(r.step_p50_s)} | {fmt.pct(r.data_wait_frac)} |" for r in data.job.rows]
        lines.append("")
    lines += ["### Environment", ""] + _kv(data.environment)
    lines += ["", "### pitstop's overhead", ""] + _kv(data.overhead)
    if data.notes:
        lines += ["", "### Notes", ""] + [f"- {n}" for n in data.notes]
    return "\n".join(lines) + "\n"
