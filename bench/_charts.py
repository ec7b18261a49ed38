"""Charts the benchmarks write next to docs/benchmarks.md (``docs/img/*.png``): what people
would rather look at than read. matplotlib's Agg backend (no display); every chart is
written from the figures of the run that prints them, never from stored numbers."""

from __future__ import annotations

import os
from collections.abc import Sequence

IMG_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "img")
COLORS = {"sparklog": "#1f77b4", "peer": "#ff7f0e", "other": "#7f7f7f"}


def _plt():  # type: ignore[no-untyped-def]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def path_for(name: str) -> str:
    os.makedirs(IMG_DIR, exist_ok=True)
    return os.path.normpath(os.path.join(IMG_DIR, name))


def _finish(plt, fig, ax, name: str, title: str, note: str) -> str:  # type: ignore[no-untyped-def]
    """Title, the run's note at the bottom, written to ``docs/img/<name>``; the path."""
    ax.set_title(title, fontsize=10)
    if note:
        fig.text(0.01, 0.01, note, fontsize=7, color="#555555")
    fig.tight_layout(rect=(0, 0.04 if note else 0, 1, 1))
    out = path_for(name)
    fig.savefig(out)
    plt.close(fig)
    return out


def bars(
    name: str, title: str, labels: Sequence[str], values: Sequence[float], ylabel: str,
    *, colors: Sequence[str] | None = None, note: str = "",
) -> str:  # fmt: skip
    """A bar chart, each bar labelled with its value; returns the file written."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 3.8), dpi=110)
    bars_ = ax.bar(labels, values, color=colors or [COLORS["sparklog"]] * len(values))
    for b, v in zip(bars_, values, strict=True):
        ax.annotate(f"{v:,.0f}", (b.get_x() + b.get_width() / 2, b.get_height()),
                    ha="center", va="bottom", fontsize=8)  # fmt: skip
    ax.set_ylabel(ylabel)
    ax.tick_params(axis="x", labelsize=8)
    return _finish(plt, fig, ax, name, title, note)


def cdf(
    name: str, title: str, series: dict[str, Sequence[float]], xlabel: str, *, note: str = ""
) -> str:
    """Cumulative distributions (e.g. latencies) of each series, log x."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 3.8), dpi=110)
    for label, values in series.items():
        xs = sorted(values)
        if not xs:
            continue
        ys = [(i + 1) / len(xs) for i in range(len(xs))]
        ax.plot(xs, ys, label=label)
    ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("fraction")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return _finish(plt, fig, ax, name, title, note)


def timeline(
    name: str, title: str, series: dict[str, tuple[Sequence[float], Sequence[float]]],
    xlabel: str, ylabel: str, *, marks: dict[str, float] | None = None, note: str = "",
) -> str:  # fmt: skip
    """Lines over time (x, y per series), with vertical marks (e.g. a fault)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 3.8), dpi=110)
    for label, (xs, ys) in series.items():
        ax.plot(xs, ys, label=label, linewidth=1)
    for label, x in (marks or {}).items():
        ax.axvline(x, color="#d62728", linestyle="--", linewidth=1)
        ax.annotate(label, (x, ax.get_ylim()[1]), fontsize=7, color="#d62728",
                    ha="left", va="top", rotation=90)  # fmt: skip
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return _finish(plt, fig, ax, name, title, note)
