"""Terminal plots of a metrics history (plotext: maintained, pure Python, no native dependencies).

One small chart per series (loss, eval loss, eval accuracy, samples/s, learning rate) against steps;
with a second history (`--compare`) both runs are drawn on the same axes, labelled by name.
plotext 6 draws on one module-level figure: each chart clears it, registers its signals and builds.
"""

from __future__ import annotations

from kubetrain.observe.history import SERIES, History

WIDTH, HEIGHT = 100, 14
MARKERS = ("•", "x")  # without colour, each compared run has its own glyph (shown in the legend)


def plot_text(histories: list[History], width: int = WIDTH, height: int = HEIGHT, color: bool = False) -> str:
    """The charts as text (ANSI colours only with `color`); series no history has are left out."""
    import plotext  # plotext only when a plot is drawn

    figure = plotext.figure
    charts = []
    for title in SERIES:
        data = [(h.name, *h.series(title)) for h in histories]
        if not any(xs for _, xs, _ in data) and not any(h.diverged(title) for h in histories):
            continue
        figure.clear()
        figure.plot_size(width, height)
        diverged = [f"{h.name + ' ' if len(histories) > 1 else ''}{text} from step {step:.0f}"
                    for h in histories if (found := h.diverged(title)) for step, text in [found]]
        figure.title(f"{title} / step" + (f"  DIVERGED: {', '.join(diverged)}" if diverged else ""))
        for index, (name, xs, ys) in enumerate(data):
            if xs:
                marker = MARKERS[index % len(MARKERS)] if len(histories) > 1 and not color else None
                signal = figure.signal(xs, ys, marker=marker) if marker else figure.signal(xs, ys)
                signal.lines()
                if len(histories) > 1:
                    signal.label(name)
                figure.draw(signal)
        charts.append(figure.build().string(colorless=not color))
    figure.clear()
    return "\n".join(charts)
