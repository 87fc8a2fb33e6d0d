"""One truth: every measured figure the README and the user guide quote is one that docs/
records.

The README and docs/guide.md summarise; docs/benchmarks.md (and docs/partitioner.md) hold the tables of the
runs, with their commands, dates and loads. A figure in the README's prose (a number with a
unit: %, ×, s, GB, MiB, ...) that appears in neither document was either never recorded or
has drifted from what was, and fails here. Settings and machine facts that are not
measurements are listed in NOT_MEASURED with the reason.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

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


#: The documents whose prose figures must be recorded in docs/benchmarks.md or docs/partitioner.md.
SUMMARIES = ("README.md", "docs/guide.md")


def readme_figures(doc: str = "README.md") -> list[str]:
    text = (REPO / doc).read_text()
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


@pytest.mark.parametrize("doc", SUMMARIES)
def test_readme_figures_are_recorded_in_docs(doc):
    docs = (REPO / "docs" / "benchmarks.md").read_text() + (REPO / "docs" / "partitioner.md").read_text()
    missing = [f for f in readme_figures(doc)
               if f not in NOT_MEASURED and f.replace(" ", "") not in {k.replace(" ", "") for k in NOT_MEASURED}
               and not recorded(f, docs)]
    assert not missing, (f"{doc}: figures found neither in docs/benchmarks.md nor docs/partitioner.md "
                         f"(record the run there, or drop the figure): {missing}")
