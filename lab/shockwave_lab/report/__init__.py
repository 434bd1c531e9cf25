"""`shockwave report`: figures and a self-contained HTML page from `shockwave simulate -o` results files.

    from shockwave_lab.report import make_report
    summary = make_report(["results.json"], "report.html")      # also writes report_<figure>.png

Modules: `load` (read, check and merge results files), `plots` (matplotlib figures, Agg canvas),
`html` (the page: inline CSS, figures as base64 data URIs).
"""
from __future__ import annotations

from pathlib import Path

from shockwave_lab.report.load import Merged, ReportError, load_results

__all__ = ["Merged", "ReportError", "load_results", "make_report", "png_paths"]


def png_paths(output, png_dir=None, names=None) -> dict[str, Path]:
    """Where each figure's PNG goes: `<png_dir or the HTML's folder>/<HTML stem>_<figure>.png`."""
    from shockwave_lab.report.plots import FIGURES
    output = Path(output)
    folder = Path(png_dir) if png_dir is not None else output.parent
    return {name: folder / f"{output.stem}_{name}.png" for name in (names or FIGURES)}


def _check_writable(path: Path, what: str) -> None:
    if path.is_dir():
        raise ReportError(f"{path}: is a directory, expected {what} file name")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise ReportError(f"{path}: {parent} is not a directory")
            break


def make_report(results_files, output, png_dir=None, title: str | None = None) -> dict:
    """Merge the results files, draw the figures, write the PNGs and the HTML page; return a summary.

    Everything is checked and rendered before the first file is written, so bad input writes nothing.
    """
    from shockwave_lab.report.html import build_html
    from shockwave_lab.report.plots import colours, render_all

    merged = load_results([str(p) for p in results_files])
    output = Path(output)
    targets = png_paths(output, png_dir)
    _check_writable(output, "an HTML")
    if png_dir is not None and Path(png_dir).exists() and not Path(png_dir).is_dir():
        raise ReportError(f"--png-dir {png_dir}: not a directory")
    for p in targets.values():
        _check_writable(p, "a PNG")
    pngs = render_all(merged)
    page = build_html(merged, pngs, colours(merged.policies), **({"title": title} if title else {}))
    try:
        for name, data in pngs.items():
            targets[name].parent.mkdir(parents=True, exist_ok=True)
            targets[name].write_bytes(data)
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(page, encoding="utf-8")
    except OSError as e:
        raise ReportError(f"cannot write the report: {e}") from None
    return {
        "html": str(output),
        "html_bytes": len(page.encode("utf-8")),
        "pngs": {name: str(targets[name]) for name in pngs},
        "png_bytes": {name: len(data) for name, data in pngs.items()},
        "files": merged.files,
        "policies": merged.policies,
        "sources": merged.sources,
        "reference_policies": list(merged.reference),
        "warnings": merged.warnings,
        "metrics": merged.table(),
    }
