"""Every shell and Python block of the README and the user guide runs as written.

Each document runs in a fresh copy of the checkout's files (what a clone holds, plus files
not yet committed), with ``.venv`` activated as the README says (``PATH`` and
``VIRTUAL_ENV`` of the interpreter running the tests), top to bottom, so a block may use
what an earlier block of the same document made. ``GNNPIPE_DATASETS`` points at the real raw
datasets, as the README's user path sets it beside ``../shared``.

A block may carry annotations, HTML comments on the lines just above its fence (the
document says the same in words where the reader needs it):

``<!-- docs-test: sub "OLD" "NEW" -->``
    run the block with OLD replaced by NEW (a smaller input: "the docs test runs 2 epochs").
``<!-- docs-test: needs dgl -->`` / ``needs root``
    run only where DGL is installed (always under GNNPIPE_REQUIRE_DGL=1) / as root with ip.
``<!-- docs-test: skip REASON -->``
    never run here: hardware this machine lacks, or a set-up that .ci/run itself performs.

The fast tests check the annotations (every block has a language, every ``sub`` matches its
block, every skip says why); the slow ones run the blocks.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gnnpipe.extras import has_dgl

REPO = Path(__file__).resolve().parents[1]
DOCS = ("README.md", "docs/guide.md")
RUN_LANGS = {"bash": "bash", "sh": "bash", "python": "python"}
KNOWN_LANGS = set(RUN_LANGS) | {"text", "toml", "json"}
NEEDS = {"dgl", "root"}
BLOCK_TIMEOUT_S = 1200

_FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
_NOTE = re.compile(r"^\s*<!--\s*docs-test:\s*(.*?)\s*-->\s*$")


@dataclass
class Block:
    doc: str
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    subs: list[tuple[str, str]] = field(default_factory=list)
    needs: set[str] = field(default_factory=set)
    skip: str | None = None

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"

    def runnable_code(self) -> str:
        code = self.code
        for old, new in self.subs:
            code = code.replace(old, new)
        return code


def _note(block_notes: list[str], where: str) -> tuple[list[tuple[str, str]], set[str], str | None]:
    subs, needs, skip = [], set(), None
    for note in block_notes:
        kind, _, rest = note.partition(" ")
        if kind == "sub":
            args = shlex.split(rest)
            if len(args) != 2:
                raise ValueError(f"{where}: docs-test sub takes two quoted strings, got {rest!r}")
            subs.append((args[0], args[1]))
        elif kind == "needs":
            needs.update(rest.split())
        elif kind == "skip":
            skip = rest.strip()
        else:
            raise ValueError(f"{where}: unknown docs-test annotation {note!r} (sub, needs, skip)")
    return subs, needs, skip


def parse(doc: str, text: str | None = None) -> list[Block]:
    """The fenced blocks of ``doc`` with their annotations."""
    lines = (text if text is not None else (REPO / doc).read_text()).splitlines()
    blocks: list[Block] = []
    notes: list[str] = []
    i = 0
    while i < len(lines):
        m_note = _NOTE.match(lines[i])
        m_fence = _FENCE.match(lines[i])
        if m_note:
            notes.append(m_note.group(1))
        elif m_fence:
            indent, lang = m_fence.group(1), m_fence.group(2)
            start = i
            body = []
            i += 1
            while i < len(lines) and not re.match(r"^\s*```\s*$", lines[i]):
                body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i].lstrip())
                i += 1
            subs, needs, skip = _note(notes, f"{doc}:{start + 1}")
            blocks.append(Block(doc, start + 1, lang, "\n".join(body) + "\n", subs, needs, skip))
            notes = []
        elif lines[i].strip():
            notes = []  # an annotation belongs to the block right below it
        i += 1
    return blocks


# ------------------------------------------------------------------ fast: the annotations
def test_the_parser_reads_annotations_and_indented_blocks():
    text = ('x\n<!-- docs-test: sub "a 1" "a 2" -->\n<!-- docs-test: needs dgl -->\n```bash\necho a 1\n```\n'
            'para\n\n  <!-- docs-test: skip no GPU here -->\n  ```python\n  print(1)\n  ```\n'
            '<!-- docs-test: needs root -->\ntext between\n```text\nout\n```\n')
    a, b, c = parse("t.md", text)
    assert (a.lang, a.line, a.subs, a.needs, a.runnable_code()) == ("bash", 4, [("a 1", "a 2")], {"dgl"}, "echo a 2\n")
    assert (b.lang, b.skip, b.code) == ("python", "no GPU here", "print(1)\n")
    assert c.needs == set()  # the annotation was separated from the block by text


@pytest.mark.parametrize("doc", DOCS)
def test_every_block_is_annotated_soundly(doc):
    blocks = parse(doc)
    assert any(b.lang in RUN_LANGS for b in blocks), f"{doc}: no runnable block found"
    for b in blocks:
        assert b.lang in KNOWN_LANGS, f"{b.where}: a fence needs a language ({sorted(KNOWN_LANGS)}), got {b.lang!r}"
        for old, _ in b.subs:
            assert old in b.code, f"{b.where}: docs-test sub {old!r} does not occur in the block"
        assert b.needs <= NEEDS, f"{b.where}: unknown needs {b.needs - NEEDS}"
        if b.skip is not None:
            assert len(b.skip) > 10, f"{b.where}: a skipped block must say why"
        assert not (b.lang not in RUN_LANGS and (b.subs or b.needs)), f"{b.where}: annotations on a block never run"


# ------------------------------------------------------------------ slow: run them
def _workspace(tmp: Path) -> Path:
    """A copy of what a clone holds (tracked files plus untracked, non-ignored ones)."""
    ws = tmp / "checkout"
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, check=True,
                           capture_output=True).stdout.decode().split("\0")
    for f in filter(None, files):
        src = REPO / f
        if src.is_file():
            dst = ws / f
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
    (ws / ".venv").symlink_to(Path(sys.prefix))  # the environment the README's set-up made
    return ws


def _env(ws: Path) -> dict[str, str]:
    from conftest import DATASETS

    env = {k: v for k, v in os.environ.items() if not k.startswith("GNNPIPE_")
           and k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    venv_bin = str(ws / ".venv" / "bin")
    env.update(PATH=venv_bin + os.pathsep + env.get("PATH", ""), VIRTUAL_ENV=str(ws / ".venv"),
               GNNPIPE_DATASETS=str(DATASETS), OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    return env


def _why_not(b: Block) -> str | None:
    if b.skip is not None:
        return b.skip
    if "dgl" in b.needs and not has_dgl() and os.environ.get("GNNPIPE_REQUIRE_DGL") != "1":
        return "DGL is not installed"
    if "root" in b.needs and (os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("tc") is None):
        return "needs root with iproute2"
    return None


@pytest.mark.slow
@pytest.mark.realdata
@pytest.mark.timeout(3600)  # every block of a document, one after another (each has its own limit)
@pytest.mark.parametrize("doc", DOCS)
def test_every_block_of_the_document_runs(doc, raw_datasets, tmp_path):
    ws = _workspace(tmp_path)
    env = _env(ws)
    ran, skipped, failed = [], [], []
    for b in parse(doc):
        if b.lang not in RUN_LANGS:
            continue
        why = _why_not(b)
        if why:
            skipped.append(f"{b.where} ({why})")
            continue
        code = b.runnable_code()
        if RUN_LANGS[b.lang] == "bash":
            cmd = ["bash", "-euo", "pipefail", "-c", code]
        else:
            script = ws / f"_docs_block_{b.line}.py"
            script.write_text(code)
            cmd = [str(ws / ".venv" / "bin" / "python"), script.name]
        p = subprocess.run(cmd, cwd=ws, env=env, capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S)
        ran.append(b.where)
        if p.returncode != 0:
            failed.append(f"{b.where} exited {p.returncode}:\n{code}\n--- stderr (tail) ---\n{p.stderr[-3000:]}")
    print(f"{doc}: ran {len(ran)} blocks; skipped {len(skipped)}: {skipped}")
    assert ran, f"{doc}: no block ran"
    assert not failed, "\n\n".join(failed)
