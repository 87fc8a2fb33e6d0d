"""Measure the accuracy every Python example of the README and the user guide promises.

Runs each fenced ``python`` block of README.md and docs/guide.md that prints
``test_acc_at_best_val``, exactly as written (the docs test shortens them; this does not),
one after another in a scratch folder whose ``datasets/`` holds the prepared graphs they
load, and prints one line per block: where it is, the accuracy it printed, its wall time and
the load average before and after.

    python scripts/examples_accuracy.py [--raw-root ../shared/datasets]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCS = ("README.md", "docs/guide.md")


def blocks(doc: str) -> list[tuple[int, str]]:
    """(line, code) of every python block of ``doc`` that prints the test accuracy."""
    out, lines = [], (REPO / doc).read_text().splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^(\s*)```python\s*$", lines[i])
        if m:
            start, body = i + 1, []
            i += 1
            while not re.match(r"^\s*```\s*$", lines[i]):
                body.append(lines[i])
                i += 1
            code = textwrap.dedent("\n".join(body)) + "\n"
            if 'print(res.summary["test_acc_at_best_val"])' in code:
                out.append((start, code))
        i += 1
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--raw-root", default=os.environ.get("GNNPIPE_DATASETS", str(REPO.parent / "shared" / "datasets")),
                    help="folder of raw dataset folders (default $GNNPIPE_DATASETS or ../shared/datasets)")
    args = ap.parse_args()
    venv_bin = Path(sys.executable).parent
    with tempfile.TemporaryDirectory(prefix="gnnpipe-examples-") as tmp:
        for name in ("cora", "squirrel"):
            subprocess.run([str(venv_bin / "gnnpipe-data"), "prepare", name, "--raw-root", args.raw_root,
                            "--root", str(Path(tmp) / "datasets")], check=True, capture_output=True)
        env = dict(os.environ, OMP_NUM_THREADS="1")
        for doc in DOCS:
            for line, code in blocks(doc):
                script = Path(tmp) / "example.py"
                script.write_text(code)
                load0, t0 = os.getloadavg()[0], time.monotonic()
                p = subprocess.run([sys.executable, script.name], cwd=tmp, env=env, capture_output=True, text=True)
                wall = time.monotonic() - t0
                if p.returncode != 0:
                    print(f"{doc}:{line}: FAILED (exit {p.returncode})\n{p.stderr[-2000:]}")
                    return 1
                acc = float(p.stdout.strip().splitlines()[-1])
                print(f"{doc}:{line}: test accuracy {100 * acc:.1f} %, {wall:.0f} s, "
                      f"load {load0:.1f} -> {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
