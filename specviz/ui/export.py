"""Files for a comparison: JSON and CSV (trace.py makes the text), charts as standalone HTML and PNG."""

from __future__ import annotations

import atexit
import shutil
import tempfile
import threading
from pathlib import Path

import plotly.graph_objects as go

from ..decoding.trace import Comparison
from ..explain.sweep import Sweep, can_replay, sweep
from .explain_plots import explain_figures
from .plots import lookahead_figure, progress_figure, sweep_figure, threshold_figure


def charts(comparison: Comparison, eos_ids: frozenset[int] = frozenset(),
           draft_ratio: float | None = None) -> dict[str, go.Figure]:
    """Every chart a comparison has, by file stem, built from the comparison record alone (so an
    imported JSON file gives the same charts). `draft_ratio`: the what-if's draft cost, as a
    fraction of a target pass; None means as measured in the run."""
    figures = {"lookahead": lookahead_figure(comparison), "progress": progress_figure(comparison),
               **explain_figures(comparison)}
    if can_replay(comparison) and comparison.traces:
        figures["sweep"] = sweep_figure(sweep(comparison, eos_ids, draft_ratio), comparison)
    if any(r.threshold is not None for t in comparison.traces for r in t.rounds):
        figures["threshold"] = threshold_figure(comparison)
    return figures


def write_png(figure: go.Figure, path: Path) -> str | None:
    """Write a PNG; None on success, else why not (kaleido needs a Chrome or Chromium on the machine)."""
    try:
        figure.write_image(path, width=1200, height=int(figure.layout.height or 560), scale=1)
    except Exception as error:  # noqa: BLE001 - any renderer failure means: no PNG, say why
        return f"PNG export is unavailable here ({type(error).__name__}); the HTML file has the same chart."
    return None


def write_all(comparison: Comparison, folder: Path, eos_ids: frozenset[int] = frozenset(),
              png: bool = True) -> tuple[list[Path], list[str]]:
    """comparison.json, rounds.csv and every chart as HTML (and PNG); returns paths and warnings."""
    folder.mkdir(parents=True, exist_ok=True)
    written = [folder / "comparison.json", folder / "rounds.csv"]
    written[0].write_text(comparison.to_json(), encoding="utf-8")
    written[1].write_text(comparison.to_csv(), encoding="utf-8")
    warnings: list[str] = []
    for stem, figure in charts(comparison, eos_ids).items():
        html_path = folder / f"{stem}.html"
        figure.write_html(html_path, include_plotlyjs=True, full_html=True)  # works offline
        written.append(html_path)
        if png:
            problem = write_png(figure, folder / f"{stem}.png")
            if problem:
                warnings.append(problem)
                png = False
            else:
                written.append(folder / f"{stem}.png")
    return written, warnings


class ExportFolders:
    """Where the page writes its downloads: one folder per export, under one root per process.

    Every comparison shown writes about 40 MB (each chart's HTML carries plotly.js so that it opens
    offline), and Gradio serves the files from copies in its own cache. A fresh folder per export
    that nobody removes fills a Space's disk (and did fill CI's), so only the newest `kept` folders
    stay (older downloads are already in Gradio's cache), and the root goes when the process ends."""

    def __init__(self, kept: int = 4, parent: Path | None = None):
        self.kept = kept
        self._parent = parent
        self._root: Path | None = None
        self._made: list[Path] = []
        self._lock = threading.Lock()

    def new(self) -> Path:
        with self._lock:
            if self._root is None:
                self._root = Path(tempfile.mkdtemp(prefix="specviz-exports-", dir=self._parent))
                atexit.register(shutil.rmtree, self._root, True)
            folder = Path(tempfile.mkdtemp(dir=self._root))
            self._made.append(folder)
            while len(self._made) > self.kept:
                shutil.rmtree(self._made.pop(0), ignore_errors=True)
            return folder


def sweep_rows(result: Sweep) -> list[list]:
    return [[r.label, r.target_passes, r.draft_passes, f"{r.estimated_s:.2f}", f"{r.estimated_speedup:.2f}x"]
            for r in result.thresholds + result.static]


SWEEP_HEADERS = ["replayed policy", "target passes", "draft passes", "modeled s", "modeled speedup"]
