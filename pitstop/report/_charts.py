"""Provides the report's charts: step time with data wait, throughput, resources over time, memory."""

from __future__ import annotations

from pitstop.analysis import format as fmt
from pitstop.analysis import loader_label
from pitstop.report._data import ReportData
from pitstop.report._svg import PALETTE, Line, chart


def _ms(seconds: float) -> str:
    ms = seconds * 1e3
    return f"{ms:.0f} ms" if ms >= 10 or ms == 0 else f"{ms:.1f} ms"


def _scaled(lines: list[Line]) -> tuple[list[Line], str]:
    """Byte series in MiB or GiB, so the axis ticks are round numbers of the unit shown."""
    top = max((y for line in lines for _, y in line.points), default=0.0)
    unit, div = ("GiB", float(1 << 30)) if top >= 4 * (1 << 30) else ("MiB", float(1 << 20))
    return [Line(line.label, [(x, y / div) for x, y in line.points], line.color, line.area, line.width, line.dashed)
            for line in lines], unit


def charts(data: ReportData) -> list[str]:
    """SVG charts, in the order the report shows them; a chart with nothing recorded says so."""
    steps, samples = data.series.steps, data.series.samples
    out = [chart(
        "Step time and data wait (training steps; mean per bucket, dashed: slowest step)",
        [Line("step time", steps.points("wall"), PALETTE[0], area=True),
         Line("data wait", steps.points("wait"), PALETTE[1], area=True),
         Line("slowest step", steps.points("wall", "max"), "#999999", width=1.0, dashed=True)],
        "step", _ms)]
    rate = steps.ratio("samples", "wall_known")
    if rate:
        out.append(chart("Throughput (samples/s over each bucket of training steps)",
                         [Line("samples/s", rate, PALETTE[2])], "step", lambda v: f"{v:.0f}"))
    else:
        count = [(x, n / w) for (x, n), (_, w) in zip(steps.points("wall", "count"), steps.points("wall", "sum"))
                 if w > 0]
        out.append(chart("Throughput (steps/s; the batch size was not seen)",
                         [Line("steps/s", count, PALETTE[2])], "step", lambda v: f"{v:.2f}"))
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
