"""Which direction of a pipeline's messages costs a lossy wire its accuracy (issue 29, part 3).

    mpirun -np 4 python scripts/wire_direction.py --round backward --fmt int8 -- \\
        --dataset squirrel --model resgcn+ --mode pipeline ... --wire float32 --out runs/x

Runs ``gnnpipe-train`` (the arguments after ``--``; they must say ``--wire float32``) with the
chunk messages of one direction, or of one stage boundary, rounded as ``--fmt`` rounds them
and sent as float32: each such message is encoded and decoded on the sender with the same
rounding keys (seed, epoch, site, node ids) the real ``--wire FMT`` run uses, so

- ``--round both`` gives exactly the numbers of ``gnnpipe-train ... --wire FMT`` (the script
  checks nothing itself; compare the two runs' losses), and
- ``--round forward`` rounds only the activations (the rows), ``--round backward`` only their
  gradients; ``--boundary B`` limits it to the boundary after stage ``B``.

Only the values are simulated: bytes stay float32's. An experiment, not a mode of gnnpipe:
it patches :meth:`gnnpipe.parallel.pipeline.runtime.PipelineExecutor._encode` in this
process and then runs the trainer's ``main``.
"""

from __future__ import annotations

import argparse
import sys

from gnnpipe.cli.train import main as train_main
from gnnpipe.parallel.pipeline.runtime import PipelineExecutor
from gnnpipe.wire import Wire


def patch(direction: str, fmt: str, boundary: int | None) -> None:
    """Round the chosen messages as ``fmt`` would, on the sender, before they go out as float32."""
    plain = PipelineExecutor._encode

    def encode(self, msg, st, k, epoch, backward):
        out = plain(self, msg, st, k, epoch, backward)
        if self.wire.lossy:
            raise SystemExit("wire_direction.py: train with --wire float32 (the script does the rounding)")
        if direction != "both" and backward != (direction == "backward"):
            return out
        b = self.s if not backward else self.s - 1  # the boundary after stage b
        if boundary is not None and b != boundary:
            return out
        w = Wire(fmt, seed=self.wire.seed)
        q = w.encode(msg, epoch=epoch, site=self._site(backward), gid=st.chunks[k].block.dst_gid)
        return w.decode(q, msg.shape[1])

    PipelineExecutor._encode = encode


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--" not in argv:
        raise SystemExit("usage: wire_direction.py --round {forward,backward,both} [--fmt int8] [--boundary B] -- "
                         "<gnnpipe-train arguments>")
    i = argv.index("--")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--round", choices=("forward", "backward", "both"), required=True)
    ap.add_argument("--fmt", choices=("bfloat16", "int8", "int4"), default="int8")
    ap.add_argument("--boundary", type=int, default=None)
    args = ap.parse_args(argv[:i])
    patch(args.round, args.fmt, args.boundary)
    return train_main(argv[i + 1:])


if __name__ == "__main__":
    sys.exit(main())
