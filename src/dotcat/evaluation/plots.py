"""Plots of an evaluation, as PNG files: per-query differences, recall curves, and one
measure of several systems on several datasets.

Drawn with matplotlib's object API on the Agg canvas (no pyplot, no global backend, no
display needed), so they work in servers, threads and on machines without a screen. Sizes
are fixed in pixels (``width`` x ``height`` at ``dpi``) so that files are comparable.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator, NullFormatter, ScalarFormatter

from dotcat.evaluation.metrics import EvalReport

DPI = 100
WIDTH_INCHES = 9.0
PANEL_INCHES = 2.4
_BETTER, _WORSE = "#2a9d4b", "#d1495b"
SIGNIFICANT = "†"  # as the report's tables mark a significant difference
_LINE_STYLES = ("-", "--", "-.", ":")
_DEPTH_TICKS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)


def _figure(width: float, height: float):
    figure = Figure(figsize=(width, height), dpi=DPI)
    FigureCanvasAgg(figure)
    return figure


def per_query_difference_plot(
    reports: Mapping[str, EvalReport], baseline: str, measure: str, path: str | Path
) -> Path:
    """Per-query differences against the baseline, sorted, one panel per system.

    Each panel shows ``system(q) - baseline(q)`` for every query, largest first, as bars
    (green: better than the baseline, red: worse); the title counts wins, ties and losses.
    Panels share the y axis so systems compare at a glance. Written as a PNG of
    ``WIDTH_INCHES x (0.8 + PANEL_INCHES * panels)`` inches at :data:`DPI`.
    """
    systems = [name for name in reports if name != baseline]
    base = reports[baseline].per_query
    figure = _figure(WIDTH_INCHES, 0.8 + PANEL_INCHES * max(len(systems), 1))
    axes = figure.subplots(max(len(systems), 1), 1, sharex=True, sharey=True, squeeze=False)
    for ax, name in zip(axes[:, 0], systems, strict=False):
        per_query = reports[name].per_query
        d = np.sort([per_query[q][measure] - base[q][measure] for q in base])[::-1]
        x = np.arange(1, len(d) + 1)
        ax.bar(x[d > 0], d[d > 0], width=1.0, color=_BETTER)
        ax.bar(x[d < 0], d[d < 0], width=1.0, color=_WORSE)
        ax.axhline(0.0, color="black", linewidth=0.8)
        wins, losses = int(np.sum(d > 1e-9)), int(np.sum(d < -1e-9))
        ax.set_title(
            f"{name} vs {baseline}: {wins} better, {len(d) - wins - losses} equal, "
            f"{losses} worse (mean {np.mean(d):+.4f})",
            fontsize=10,
        )
        ax.set_ylabel(f"Δ {measure}")
        ax.grid(axis="y", alpha=0.3)
        handles = [Patch(color=_BETTER, label="better than baseline"),
                   Patch(color=_WORSE, label="worse than baseline")]  # fmt: skip
        ax.legend(handles=handles, loc="upper right", fontsize=8)
    if not systems:
        axes[0, 0].text(0.5, 0.5, "no system besides the baseline", ha="center")
    axes[-1, 0].xaxis.set_major_locator(MaxNLocator(integer=True))
    axes[-1, 0].set_xlim(0.5, len(base) + 0.5)
    axes[-1, 0].set_xlabel("queries, sorted by difference (largest gain first)")
    figure.suptitle(f"Per-query {measure} difference against the baseline {baseline}")
    figure.tight_layout()
    return _save(figure, path)


def recall_plot(curves: Mapping[str, Mapping[int, float]], path: str | Path) -> Path:
    """Recall at depths 1..k, one line per system (log-scaled depth axis).

    ``curves``: system -> {depth: mean recall} (:func:`dotcat.evaluation.metrics.recall_curve`).
    Written as a PNG of ``WIDTH_INCHES x 5.5`` inches at :data:`DPI`.
    """
    figure = _figure(WIDTH_INCHES, 5.5)
    ax = figure.subplots()
    for i, (name, curve) in enumerate(curves.items()):
        depths = sorted(curve)
        style = _LINE_STYLES[i % len(_LINE_STYLES)]  # dashes keep overlapping lines visible
        ax.plot(depths, [curve[d] for d in depths], style, label=name, linewidth=1.6)
    depth = max((max(c) for c in curves.values() if c), default=1)
    ax.set_xscale("log")
    ax.set_xticks([t for t in _DEPTH_TICKS if t <= depth] + ([depth] if depth not in
                  _DEPTH_TICKS else []))  # fmt: skip
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("depth k (results per query, log scale)")
    ax.set_ylabel("mean recall R@k")
    ax.set_ylim(0.0, 1.0)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right", fontsize=9)
    ax.set_title(f"Recall at depths 1 to {depth}")
    figure.tight_layout()
    return _save(figure, path)


def _save(figure, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png", dpi=DPI)
    return path


def datasets_plot(
    values: Mapping[str, Mapping[str, float | None]],
    measure: str,
    path: str | Path,
    marks: Mapping[str, Mapping[str, bool]] | None = None,
    title: str | None = None,
) -> Path:
    """One measure of several systems on several datasets, as grouped bars.

    ``values``: system -> group (a dataset, or the mean) -> value; a group per x position in
    the order of the first system's mapping, a bar per system within it (None: no bar), its
    value written above it. ``marks``: system -> group -> True where the value differs
    significantly from the baseline's; such values carry a dagger. Written as a PNG of
    ``WIDTH_INCHES`` (wider with many bars) x 5 inches at :data:`DPI`.
    """
    systems = list(values)
    groups = list(next(iter(values.values()), {}))
    figure = _figure(max(WIDTH_INCHES, 2.5 + 0.4 * len(groups) * max(len(systems), 1)), 5.0)
    ax = figure.subplots()
    width = 0.8 / max(len(systems), 1)
    for i, system in enumerate(systems):
        flagged = (marks or {}).get(system, {})
        for j, group in enumerate(groups):
            value = values[system].get(group)
            if value is None:
                continue
            x = j + (i - (len(systems) - 1) / 2) * width
            ax.bar(x, value, width, color=f"C{i}", label=system if j == 0 else None)
            text = f"{value:.3f}".lstrip("0") + (SIGNIFICANT if flagged.get(group) else "")
            ax.annotate(text, (x, value), ha="center", va="bottom", fontsize=7)
    ax.set_xticks(np.arange(len(groups)), groups)
    ax.set_ylabel(measure)
    top = max((v for per in values.values() for v in per.values() if v is not None), default=1)
    ax.set_ylim(0.0, top * 1.1)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=9)
    ax.set_title(title or f"{measure} per dataset ({SIGNIFICANT}: differs from the baseline)")
    figure.tight_layout()
    return _save(figure, path)
