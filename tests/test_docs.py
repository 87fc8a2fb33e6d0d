"""One truth: every measured figure the README quotes is one that docs/ records.

The README summarises; docs/benchmarks.md (and docs/partitioner.md) hold the tables of the
runs, with their commands, dates and loads. A figure in the README's prose (a number with a
unit: %, ×, s, GB, MiB, ...) that appears in neither document was either never recorded or
has drifted from what was, and fails here. Settings and machine facts that are not
measurements are listed in NOT_MEASURED with the reason.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# Numbers in the README that are settings or facts, not measurements.
NOT_MEASURED = {
    "12.5 %": "chance level of the 8-class default graph (1/8)",
    "2×": "the --metis-budget default",
    "512 MiB": "the --metis-budget floor",
    "1 MiB": "the --lean-memory mmap threshold",
    "23 GiB": "this machine's memory",
    "25 %": "the accuracy band the planner's predictions are judged by",
    "16 ×": "plain METIS's bytes per edge relative to the CSR, from docs/partitioner.md's derivation",
}

FIGURE = re.compile(r"(?<![\w.,])(\d[\d,]*(?:\.\d+)?)(\s?)(%|×|s/epoch|GB|GiB|MB|MiB|min|s)(?![\w/])")


def readme_figures() -> list[str]:
    text = (REPO / "README.md").read_text()
    text = re.sub(r"```.*?```", "", text, flags=re.S)  # commands, not figures
    text = re.sub(r"`[^`]*`", "", text)
    return [m.group(1) + m.group(2) + m.group(3) for m in FIGURE.finditer(text)]


def recorded(fig: str, docs: str) -> bool:
    num = re.match(r"[\d,.]+", fig).group(0)
    return re.search(r"(?<![\d.])" + re.escape(num) + r"(?![\d])", docs) is not None


def test_the_figure_pattern_finds_figures_and_skips_code():
    text = "a 12.3 % gain, 4.5 s per epoch, `--x 9.9 %` and 2,032 nodes in 6 s"
    found = [m.group(1) + m.group(3) for m in FIGURE.finditer(re.sub(r"`[^`]*`", "", text))]
    assert found == ["12.3%", "4.5s", "6s"]
    assert recorded("12.3 %", "| 12.3 |") and not recorded("12.3 %", "112.35")


def test_readme_figures_are_recorded_in_docs():
    docs = (REPO / "docs" / "benchmarks.md").read_text() + (REPO / "docs" / "partitioner.md").read_text()
    missing = [f for f in readme_figures()
               if f not in NOT_MEASURED and f.replace(" ", "") not in {k.replace(" ", "") for k in NOT_MEASURED}
               and not recorded(f, docs)]
    assert not missing, ("README figures found neither in docs/benchmarks.md nor docs/partitioner.md "
                         f"(record the run there, or drop the figure): {missing}")
