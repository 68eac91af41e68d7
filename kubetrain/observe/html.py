"""`kubetrain metrics --html report.html`: one self-contained file with interactive charts.

The chart library is uPlot (MIT, ~50 kB minified, no dependencies), shipped as package data under
kubetrain/observe/assets/ (from the npm package `uplot`, with its licence) and inlined into the file, so
the report opens offline and needs no network at view time. After drawing, the page records what it drew
in `<body data-rendered=...>` (series -> points drawn), which the browser test reads.
"""

from __future__ import annotations

import html
import json
from importlib import resources
from typing import Any

from kubetrain.observe.history import SERIES, History

TEMPLATE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>{css}
body {{ font-family: sans-serif; margin: 1.5em; color: #222; }}
.charts {{ display: flex; flex-wrap: wrap; gap: 1.5em; }}
</style>
<script>{js}</script>
<!-- uPlot: {licence_line} (full licence below) -->
</head><body data-rendered="">
<h1>{title}</h1>
<p>{summary}</p>
<div class="charts" id="charts"></div>
<script type="application/json" id="kt-data">{data}</script>
<script>
(function () {{
  const report = JSON.parse(document.getElementById("kt-data").textContent);
  const colours = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"];
  const drawn = {{}};
  for (const chart of report.charts) {{
    const box = document.createElement("div");
    document.getElementById("charts").appendChild(box);
    const series = [{{label: "step"}}].concat(chart.names.map((name, i) => (
      {{label: name, stroke: colours[i % colours.length], width: 2, spanGaps: true, points: {{show: true}}}})));
    const opts = {{title: chart.title, width: 520, height: 280, series: series,
                  scales: {{x: {{time: false}}}}, axes: [{{label: "step"}}, {{label: chart.title}}]}};
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


def chart_data(histories: list[History]) -> list[dict[str, Any]]:
    """Per series: uPlot's aligned data, [steps, run 1 values, run 2 values...] with nulls where a run
    has no value at a step."""
    charts = []
    for title in SERIES:
        per_run = [dict(zip(*h.series(title), strict=True)) for h in histories]
        if not any(per_run):
            continue
        steps = sorted({step for run in per_run for step in run})
        data = [steps] + [[run.get(step) for step in steps] for run in per_run]
        charts.append({"title": title, "names": [h.name for h in histories], "data": data})
    return charts


def report_html(histories: list[History], summary: str = "") -> str:
    """The whole report as one HTML document."""
    title = "kubetrain metrics: " + " vs ".join(h.name for h in histories)
    payload = json.dumps({"charts": chart_data(histories)}, separators=(",", ":"))
    licence = _asset("uPlot.LICENSE")
    return TEMPLATE.format(title=html.escape(title), summary=html.escape(summary), css=_asset("uPlot.min.css"),
                           js=_asset("uPlot.iife.min.js").replace("</script", "<\\/script"),
                           data=payload.replace("</", "<\\/"), licence_line=licence.splitlines()[0],
                           licence=licence.replace("-->", "--&gt;"))
