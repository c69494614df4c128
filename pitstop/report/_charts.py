"""Provides the report's charts: step time with data wait, throughput, resources over time, memory."""

from __future__ import annotations

from collections.abc import Callable

from pitstop.analysis import format as fmt
from pitstop.analysis import loader_label
from pitstop.report._data import ReportData
from pitstop.report._job import RankSeries
from pitstop.report._series import Buckets
from pitstop.report._svg import PALETTE, Line, chart

# One colour per rank drawn (at most 8): Okabe-Ito's eight, black last.
RANK_COLORS = PALETTE[:6] + ("#F0E442", "#000000")


def _ms(seconds: float) -> str:
    ms = seconds * 1e3
    return f"{ms:.0f} ms" if ms >= 10 or ms == 0 else f"{ms:.1f} ms"


def _scaled(lines: list[Line]) -> tuple[list[Line], str]:
    """Byte series in MiB or GiB, so the axis ticks are round numbers of the unit shown."""
    top = max((y for line in lines for _, y in line.points), default=0.0)
    unit, div = ("GiB", float(1 << 30)) if top >= 4 * (1 << 30) else ("MiB", float(1 << 20))
    return [Line(line.label, [(x, y / div) for x, y in line.points], line.color, line.area, line.width, line.dashed)
            for line in lines], unit


def _steps_per_s(steps: Buckets) -> list[tuple[float, float]]:
    """(x, steps per second of training step time) per bucket: the rate where no batch size was seen."""
    return [(x, n / w) for (x, n), (_, w) in zip(steps.points("wall", "count"), steps.points("wall", "sum")) if w > 0]


def charts(data: ReportData) -> list[str]:
    """SVG charts, in the order the report shows them; a chart with nothing recorded says so."""
    if len(data.drawn) > 1:
        return job_charts(data.drawn, len(data.runs))
    steps, samples = data.series.steps, data.series.samples
    out = [chart(
        "Step time and data wait (training steps; mean per bucket, dashed: slowest step)",
        [Line("step time", steps.points("wall"), PALETTE[0], area=True),
         Line("data wait", steps.points("wait"), PALETTE[1], area=True),
         Line("slowest step", steps.points("wall", "max"), "#999999", width=1.0, dashed=True)],
        "step", _ms, robust=True)]
    rate = steps.ratio("samples", "wall_known")
    if rate:
        out.append(chart("Throughput (samples/s over each bucket of training steps)",
                         [Line("samples/s", rate, PALETTE[2])], "step", lambda v: f"{v:.0f}"))
    else:
        out.append(chart("Throughput (steps/s; the batch size was not seen)",
                         [Line("steps/s", _steps_per_s(steps), PALETTE[2])], "step", lambda v: f"{v:.2f}"))
    cpu = [Line("machine", samples.points("machine"), "#999999", dashed=True),
           Line("main process", samples.points("main"), PALETTE[0])]
    for i, key in enumerate(sorted(k for k in samples.names() if k.startswith("workers:"))):
        ident = key.split(":", 1)[1]
        label = loader_label(data.primary, int(ident)) if ident.isdigit() else ""
        cpu.append(Line(f"{label or 'loader ' + ident} workers", samples.points(key), PALETTE[(i + 1) % 6 + 1]))
    cores = data.primary.runtime.cpu_count if data.primary.runtime is not None else None
    out.append(chart(f"CPU in cores (1.0 = one core busy{f'; the machine has {cores}' if cores else ''})",
                     cpu, "time since start", lambda v: f"{v:.1f}", x_format=fmt.span))
    if samples.points("gpu_util"):
        out.append(chart("GPU utilisation (%, mean over GPUs)", [Line("util", samples.points("gpu_util"), PALETTE[5])],
                         "time since start", lambda v: f"{v:.0f}%", x_format=fmt.span))
    memory = [Line("host RSS", steps.points("rss", "max"), PALETTE[0])]
    if steps.points("allocated"):
        memory += [Line("CUDA allocated", steps.points("allocated", "max"), PALETTE[5]),
                   Line("CUDA reserved", steps.points("reserved", "max"), PALETTE[3], dashed=True)]
    memory, unit = _scaled(memory)
    out.append(chart("Memory (peak per bucket of steps)", memory, "step", lambda v: f"{v:g} {unit}"))
    return out


def job_charts(ranks: list[RankSeries], total: int) -> list[str]:
    """A job's charts: each drawn rank's line in the same colour on every chart.

    Step time alone cannot show a data straggler: in DDP every rank's step comes
    out the same, each waiting for the slowest in the all-reduce. Its data wait
    does, on a chart of its own with a line per rank.
    """
    which = "" if len(ranks) == total else f"; {len(ranks)} of {total} ranks drawn"

    def lines(points: Callable[[RankSeries], list[tuple[float, float]]]) -> list[Line]:
        return [Line(r.name, points(r), RANK_COLORS[i % len(RANK_COLORS)]) for i, r in enumerate(ranks)]

    counted = all(r.series.steps.ratio("samples", "wall_known") for r in ranks)

    def per_step_rate(r: RankSeries) -> list[tuple[float, float]]:
        return r.series.steps.ratio("samples", "wall_known") if counted else _steps_per_s(r.series.steps)

    out = [
        chart(f"Step time per rank (training steps; mean per bucket{which})",
              lines(lambda r: r.series.steps.points("wall")), "step", _ms, robust=True),
        chart(f"Data wait per rank (training steps; mean per bucket{which})",
              lines(lambda r: r.series.steps.points("wait")), "step", _ms, robust=True),
        chart(f"Throughput per rank ({'samples/s' if counted else 'steps/s'} over each bucket of training steps)",
              lines(per_step_rate), "step", (lambda v: f"{v:.0f}") if counted else (lambda v: f"{v:.2f}")),
        chart(f"CPU of each rank's main process in cores (1.0 = one core busy{which})",
              lines(lambda r: r.series.samples.points("main")), "time since its start", lambda v: f"{v:.1f}",
              x_format=fmt.span),
    ]
    if any(r.series.samples.points("gpu_util") for r in ranks):
        out.append(chart("GPU utilisation per rank (%, mean over the GPUs each rank's sampler saw)",
                         lines(lambda r: r.series.samples.points("gpu_util")), "time since its start",
                         lambda v: f"{v:.0f}%", x_format=fmt.span))
    cuda = any(r.series.steps.points("allocated") for r in ranks)
    memory, unit = _scaled(lines(lambda r: r.series.steps.points("allocated" if cuda else "rss", "max")))
    out.append(chart(f"Memory per rank ({'CUDA allocated' if cuda else 'host RSS'}, peak per bucket of steps)",
                     memory, "step", lambda v: f"{v:g} {unit}"))
    return out
