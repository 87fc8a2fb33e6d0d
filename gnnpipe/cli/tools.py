"""``gnnpipe``: small tools around runs.

    gnnpipe merge-checkpoint RUN [--out model.pt]   one model file from a run's checkpoint

``merge-checkpoint`` reads the newest committed checkpoint of a run directory (or the
checkpoint directory given), puts every rank's units together and writes one model file
(:mod:`gnnpipe.export`): a ``state_dict`` that loads into the plain, un-parallelised
``gnnpipe.models.build_model(ModelConfig(**model_config))``. Nothing of the run is changed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from gnnpipe._base import GnnpipeError
from gnnpipe.cli import run_cli
from gnnpipe.config import ArgumentParser
from gnnpipe.export import merge_checkpoint, save_model

PROG = "gnnpipe"


def _parser() -> ArgumentParser:
    ap = ArgumentParser(prog=PROG, description="Tools around gnnpipe runs.")
    sub = ap.add_subparsers(dest="tool", required=True)
    m = sub.add_parser("merge-checkpoint", help="one model file from a run's per-rank checkpoint files")
    m.add_argument("run", type=Path, help="a run directory (its newest committed checkpoint) or a checkpoint directory")
    m.add_argument("--out", type=Path, default=None, help="model file to write (default RUN/model.pt)")
    m.add_argument("--force", action="store_true", help="replace an existing model file")
    ap.add_argument("--debug", action="store_true", help="tracebacks")
    return ap


def _main(argv: Sequence[str] | None) -> int:
    args = _parser().parse_args(argv)
    state, model_config, train_config = merge_checkpoint(args.run)
    out = args.out or (args.run if args.run.is_dir() and not (args.run / "COMMIT.json").exists()
                       else args.run.parent.parent) / "model.pt"
    if out.exists() and not args.force:
        raise GnnpipeError(f"{out}: exists; pass --force to replace it, or --out another file")
    if not out.parent.is_dir():
        raise GnnpipeError(f"--out {out}: folder {out.parent} does not exist")
    save_model(out, state, model_config, train_config)
    n = sum(v.numel() for v in state.values())
    print(f"wrote {out}: {model_config['model']} with {len(state)} tensors, {n:,} weights")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli(_main, argv, prog=PROG)


if __name__ == "__main__":
    raise SystemExit(main())
