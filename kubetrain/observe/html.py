"""`kubetrain metrics --html report.html`: one self-contained file with interactive charts.

The chart library is uPlot (MIT, ~50 kB minified, no dependencies), shipped as package data under
kubetrain/observe/assets/ (from the npm package `uplot`, with its licence) and inlined into the file, so
the report opens offline and needs no network at view time. After drawing, the page records what it drew
in `<body data-rendered=...>` (series -> points drawn), which the browser test reads. A diverged run (a NaN
or infinite loss, kubetrain.observe.history) gets a banner and, on its chart, a dashed red line at that step
with `DIVERGED` in the title; the page records each line it drew in `<body data-diverged=...>`.
"""

from __future__ import annotations

import html
import json
from importlib import resources
from typing import Any

from kubetrain.metrics import diverged_text
from kubetrain.observe.history import SERIES, History

TEMPLATE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>{css}
body {{ font-family: sans-serif; margin: 1.5em; color: #222; }}
.charts {{ display: flex; flex-wrap: wrap; gap: 1.5em; }}
.diverged {{ color: #b00; font-weight: bold; }}
</style>
<script>{js}</script>
<!-- uPlot: {licence_line} (full licence below) -->
</head><body data-rendered="" data-diverged="">
<h1>{title}</h1>
<p>{summary}</p>
{banner}
<div class="charts" id="charts"></div>
<script type="application/json" id="kt-data">{data}</script>
<script>
(function () {{
  const report = JSON.parse(document.getElementById("kt-data").textContent);
  const colours = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"];
  const drawn = {{}};
  const marked = {{}};
  for (const chart of report.charts) {{
    const box = document.createElement("div");
    document.getElementById("charts").appendChild(box);
    const series = [{{label: "step"}}].concat(chart.names.map((name, i) => (
      {{label: name, stroke: colours[i % colours.length], width: 2, spanGaps: true, points: {{show: true}}}})));
    const mark = chart.diverged;
    const finite = chart.data.slice(1).some(ys => ys.some(y => y !== null));
    const hooks = mark ? {{draw: [u => {{
      const x = u.valToPos(mark.step, "x", true);
      u.ctx.save();
      u.ctx.strokeStyle = "#d62728"; u.ctx.lineWidth = 2; u.ctx.setLineDash([6, 4]);
      u.ctx.beginPath(); u.ctx.moveTo(x, u.bbox.top); u.ctx.lineTo(x, u.bbox.top + u.bbox.height); u.ctx.stroke();
      u.ctx.restore();
      marked[chart.title] = mark.text;
      document.body.dataset.diverged = JSON.stringify(marked);
    }}]}} : {{}};
    const opts = {{title: chart.title + (mark ? "  DIVERGED: " + mark.text : ""), width: 520, height: 280,
                  series: series, hooks: hooks, axes: [{{label: "step"}}, {{label: chart.title}}],
                  scales: {{x: {{time: false}}, y: finite ? {{}} : {{range: [0, 1]}}}}}};
    const plot = new uPlot(opts, chart.data, box);
    drawn[chart.title] = chart.data.slice(1).map(ys => ys.filter(y => y !== null).length)
      .reduce((a, b) => a + b, 0) * (plot.ctx.canvas.width > 0 ? 1 : 0);
  }}
  document.body.dataset.rendered = JSON.stringify(drawn);
}})();
</script>
<!--
{licence}
-->
</body></html>
"""


def _asset(name: str) -> str:
    return resources.files("kubetrain.observe").joinpath("assets", name).read_text(encoding="utf-8")


def divergence(histories: list[History], title: str) -> dict[str, Any] | None:
    """Where the first of these runs diverged on one chart: {"step", "text"} (the text names the run when
    several are compared), or None."""
    key = SERIES[title][1]
    found = [(found[0], h.name, found[1]) for h in histories if (found := h.diverged(title))]
    if not found:
        return None
    step, name, value = min(found)
    text = diverged_text(step, key, value)
    return {"step": step, "text": f"{name}: {text}" if len(histories) > 1 else text}


def chart_data(histories: list[History]) -> list[dict[str, Any]]:
    """Per series: uPlot's aligned data, [steps, run 1 values, run 2 values...] with nulls where a run
    has no value at a step (a diverged step is one, so the chart reaches it), and the divergence if any."""
    charts = []
    for title in SERIES:
        per_run = [dict(zip(*h.series(title), strict=True)) for h in histories]
        mark = divergence(histories, title)
        if not any(per_run) and mark is None:
            continue
        steps = sorted({step for run in per_run for step in run} | ({mark["step"]} if mark else set()))
        data = [steps] + [[run.get(step) for step in steps] for run in per_run]
        charts.append({"title": title, "names": [h.name for h in histories], "data": data, "diverged": mark})
    return charts


def banner(charts: list[dict[str, Any]]) -> str:
    """The report's first line when a run diverged."""
    marks = [chart["diverged"]["text"] for chart in charts if chart["diverged"]]
    if not marks:
        return ""
    return f'<p class="diverged" id="diverged">DIVERGED: {html.escape("; ".join(marks))}</p>'



def report_html(histories: list[History], summary: str = "") -> str:
    """The whole report as one HTML document."""
    title = "kubetrain metrics: " + " vs ".join(h.name for h in histories)
    charts = chart_data(histories)
    payload = json.dumps({"charts": charts}, separators=(",", ":"))
    licence = _asset("uPlot.LICENSE")
    return TEMPLATE.format(title=html.escape(title), summary=html.escape(summary), banner=banner(charts),
                           css=_asset("uPlot.min.css"),
                           js=_asset("uPlot.iife.min.js").replace("</script", "<\\/script"),
                           data=payload.replace("</", "<\\/"), licence_line=licence.splitlines()[0],
                           licence=licence.replace("-->", "--&gt;"))
