"""Count the bad-input and fault suite's cases (for the README's reliability section).

    python scripts/reliability_tally.py

Collects the suite's test files with pytest (every marker, slow and mpi included; nothing is
run) and prints the cases per file, and the bad-input table's cases per CLI.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FILES = ["tests/test_bad_input.py", "tests/test_full_disk.py", "tests/test_rundir.py", "tests/test_verify_data.py",
         "tests/test_faults.py", "tests/test_checkpoint_kill.py", "tests/test_data_content.py", "tests/test_fuzz.py"]


def main() -> int:
    p = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                        "-m", "slow or not slow", *FILES], capture_output=True, text=True, cwd=ROOT)
    ids = [ln for ln in p.stdout.splitlines() if "::" in ln]
    if p.returncode != 0 or not ids:
        print(p.stdout[-2000:] + p.stderr[-2000:], file=sys.stderr)
        return 1
    per_file = Counter(ln.split("::")[0] for ln in ids)
    for f in FILES:
        print(f"{f:32} {per_file[f]:4}")
    print(f"{'total':32} {len(ids):4}")
    sys.path.insert(0, str(ROOT / "tests"))
    import test_bad_input

    print("bad-input table by CLI: " + ", ".join(f"{cli} {n}" for cli, n in test_bad_input.tally().items())
          + f"; {len(test_bad_input.SUBPROCESS_SAMPLE)} also through the console scripts")
    return 0


if __name__ == "__main__":
    sys.exit(main())
