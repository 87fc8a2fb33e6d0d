"""``gnnpipe-bench report``: render ``docs/benchmarks.md``'s tables from stored results.

The benchmarks write only under ``results/``; the documentation changes only when someone
asks for it with this command. For every benchmark ``SUB`` whose stored summary exists
(``results/SUB/summary.md``; for ``accuracy`` the merged ``results/accuracy.json``), the
text between ``<!-- SUB:begin -->`` and ``<!-- SUB:end -->`` in the document is replaced by
that table, headed by the date of the stored run. Sections without markers are left alone
(and named), as are sections without stored results. ``--plots`` also copies the stored
PNGs into ``docs/img/``.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from gnnpipe.bench import common as C

#: Benchmarks in the order of docs/benchmarks.md, and the plots each one draws.
SECTIONS = {
    "comm": ("comm_volume.png",),
    "epoch": ("epoch_breakdown.png",),
    "memory": ("memory.png",),
    "scale": ("scale.png",),
    "overhead": ("overhead.png",),
    "accuracy": ("accuracy.png",),
}


def markers(sub: str) -> tuple[str, str]:
    """The begin / end markers of a section."""
    return f"<!-- {sub}:begin -->", f"<!-- {sub}:end -->"


def stored_table(results: Path, sub: str) -> tuple[str, str] | None:
    """(markdown table, where it came from and when) of a stored benchmark, or None when
    ``results`` holds none."""
    if sub == "accuracy":
        from gnnpipe.bench.accuracy import summarize

        f = results / "accuracy.json"
        if not f.is_file():
            return None
        try:
            runs = json.loads(f.read_text())
        except json.JSONDecodeError as e:
            raise C.BenchError(f"{f}: not JSON ({e})") from None
        stamp = time.strftime("%Y-%m-%d %H:%M", time.localtime(f.stat().st_mtime))
        return summarize(runs), f"{f} (last written {stamp})"
    d = results / sub
    md = d / "summary.md"
    if not md.is_file():
        return None
    date = ""
    if (d / "results.json").is_file():
        try:
            date = json.loads((d / "results.json").read_text()).get("date", "")
        except json.JSONDecodeError:
            date = ""
    return md.read_text().rstrip(), f"{md}" + (f" (run of {date})" if date else "")


def fill(text: str, sub: str, body: str) -> str | None:
    """``text`` with section ``sub``'s markers' contents replaced by ``body``; None when the
    markers are absent."""
    begin, end = markers(sub)
    if begin not in text or end not in text:
        return None
    a, rest = text.split(begin, 1)
    _, b = rest.split(end, 1)
    return f"{a}{begin}\n{body}\n{end}{b}"


def run(results: Path, doc: Path, only=None, plots: bool = False, img_dir: Path | None = None) -> str:
    """Fill ``doc`` from ``results``.

    Args:
        results: the results root (``gnnpipe-bench --out``).
        doc: the markdown file to update.
        only: benchmark names (default: all of :data:`SECTIONS`).
        plots: also copy each stored PNG into ``img_dir``.
        img_dir: default ``doc``'s folder ``/img``.

    Returns:
        one line per section: filled, no stored results, or no markers.

    Raises:
        BenchError: an unknown name, a missing document, or nothing stored at all.
    """
    C.check_only(only, SECTIONS, "benchmark")
    doc, results = Path(doc), Path(results)
    if not doc.is_file():
        raise C.BenchError(f"{doc}: no such document to fill")
    text = doc.read_text()
    lines, filled = [], 0
    for sub in only or SECTIONS:
        got = stored_table(results, sub)
        if got is None:
            lines.append(f"{sub}: no stored results under {results} (run `gnnpipe-bench {sub}` first)")
            continue
        table, src = got
        new = fill(text, sub, f"_Rendered by `gnnpipe-bench report` on {time.strftime('%Y-%m-%d')} from {src}._\n\n{table}")
        if new is None:
            begin, end = markers(sub)
            lines.append(f"{sub}: {doc} has no {begin} ... {end} markers; add them where the table goes")
        else:
            text, filled = new, filled + 1
            lines.append(f"{sub}: filled from {src}")
        if plots:
            dest = Path(img_dir) if img_dir else doc.parent / "img"
            for png in SECTIONS[sub]:
                src_png = results / sub / png
                if src_png.is_file():
                    dest.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(src_png, dest / png)
                    lines.append(f"{sub}: copied {src_png} -> {dest / png}")
    if filled:
        doc.write_text(text)
    elif all("no stored results" in ln for ln in lines):
        raise C.BenchError(f"{results}: no stored benchmark results; run a benchmark (e.g. `gnnpipe-bench epoch`) first")
    return "\n".join(lines)
