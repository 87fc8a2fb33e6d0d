"""One fused kernel per elementwise chain on a GPU: the hashed dropout's keep-mask, the bit
packing of saved masks and the masked multiplies, compiled with ``torch.compile``.

Why: on a GPU every eager integer op is one pass over ``n x d`` values. The keep-mask hash
(:func:`gnnpipe.models.ops.keep_mask`) is about 13 such passes, packing a mask 8, and the
multiplies that use them 2-3 more. On one H200, gnnpipe's GCN-32 epoch on a 1M-node,
20M-edge graph spent about a quarter of its 0.64 s there (``scripts/gpu_check.sh``,
2026-12-04, ``kernels.txt``), while PyG's dropout is one fused kernel. Inductor turns each
chain below into one kernel.

The functions are the eager paths' arithmetic, written without in-place ops so that they
compile: int32 multiplies wrap modulo 2**32 and arithmetic right shifts are masked to logical
ones (as in :func:`gnnpipe.models.ops._lowbias32_`), and float multiplies happen in the same
order. So the results are bit-identical: ``tests/test_fused.py`` checks each function, eager
and compiled, against :mod:`gnnpipe.models.ops` on the CPU; ``scripts/gpu_check.py`` checks
the masks on the GPU against the CPU's.

Only CUDA tensors take this path (:func:`enabled`): on the CPU the eager in-place ops are
already close to memory speed and need no C++ compiler. ``GNNPIPE_COMPILE=0`` turns it off
(``force`` turns it on everywhere, to try the path on a CPU);
a function whose compilation fails runs eagerly from then on, said once in the log.
"""

from __future__ import annotations

import logging
import os
from typing import Callable

import torch
from torch import Tensor

from gnnpipe._base import GnnpipeError

log = logging.getLogger(__name__)

#: functions compiled so far, and those whose compilation failed (eager from then on)
_COMPILED: dict[str, Callable] = {}
_FAILED: set[str] = set()


#: ``GNNPIPE_COMPILE``'s values: on (the default), off, and on for every device
_MODES = {"": "on", "1": "on", "true": "on", "yes": "on", "on": "on",
          "0": "off", "false": "off", "no": "off", "off": "off", "force": "force"}


def mode() -> str:
    """``on``, ``off`` or ``force``, from ``GNNPIPE_COMPILE`` (unset: on).

    Raises:
        GnnpipeError: any other value (a typo must not silently leave the kernels on).
    """
    raw = os.environ.get("GNNPIPE_COMPILE", "1")
    m = _MODES.get(raw.strip().lower())
    if m is None:
        raise GnnpipeError(f"GNNPIPE_COMPILE={raw!r}: expected 1 (fuse on GPUs, the default), 0 (never) or "
                           "force (on every device, to try the GPU path on a CPU)")
    return m


def enabled(t: Tensor) -> bool:
    """True where ``t``'s elementwise chains run fused: a CUDA tensor, unless ``GNNPIPE_COMPILE``
    is 0 (``force`` fuses on every device: the CPU dry run of the GPU path)."""
    m = mode()
    return m == "force" or (t.is_cuda and m == "on")


def call(fn: Callable, *args):
    """``fn(*args)`` through ``torch.compile`` (dynamic shapes, compiled once per function);
    eagerly if compiling ``fn`` failed before or fails now."""
    name = fn.__name__
    if name in _FAILED:
        return fn(*args)
    compiled = _COMPILED.get(name)
    if compiled is None:
        # the first call compiles (seconds: the first epoch on a GPU is that much longer)
        if not _COMPILED:
            log.info("compiling the fused GPU kernels on first use (once per process, a few seconds; "
                     "GNNPIPE_COMPILE=0 runs them unfused)")
        compiled = _COMPILED[name] = torch.compile(fn, dynamic=True)
    try:
        return compiled(*args)
    except Exception as e:  # noqa: BLE001 - any compiler failure: the eager path is exact too
        _FAILED.add(name)
        log.warning("torch.compile of gnnpipe.models.fused.%s failed (%s: %s); running it eagerly from now on",
                    name, type(e).__name__, str(e).splitlines()[0][:200] if str(e) else "")
        return fn(*args)


def keep_from_keys(r: Tensor, c: Tensor, thresh: int, low_mask: int) -> Tensor:
    """bool [n, C] keep-mask from int32 row keys ``r`` [n] and column keys ``c`` [C]:
    lowbias32 of ``r ^ c``, its low bits (``low_mask``) compared with ``thresh``."""
    e = r[:, None] ^ c[None, :]
    e = e ^ ((e >> 16) & 0xFFFF)
    e = e * 0x7FEB352D
    e = e ^ ((e >> 15) & 0x1FFFF)
    e = e * (0x846CA68B - (1 << 32))
    e = e ^ ((e >> 16) & 0xFFFF)
    return (e & low_mask) >= thresh


def pack8(f: Tensor) -> Tensor:
    """uint8 [m] from uint8 [m, 8] of 0/1: bit j of byte i is ``f[i, j]``."""
    shifts = torch.arange(8, device=f.device, dtype=torch.int32)
    return (f.to(torch.int32) << shifts).sum(1).to(torch.uint8)


def _bits(packed: Tensor, like: Tensor) -> Tensor:
    """int32 0/1 of ``like``'s shape: the first ``like.numel()`` bits of ``packed``."""
    shifts = torch.arange(8, device=packed.device, dtype=torch.int32)
    return ((packed.to(torch.int32)[:, None] >> shifts) & 1).reshape(-1)[: like.numel()].view(like.shape)


def keep_mul(h: Tensor, keep: Tensor, scale: float) -> Tensor:
    """``h * keep.to(h.dtype).mul_(scale)`` (the dropout's forward) in one pass."""
    return h * (keep.to(h.dtype) * scale)


def unpack_mul(g: Tensor, packed: Tensor, scale: float) -> Tensor:
    """``g * unpack(packed).to(g.dtype).mul_(scale)`` (the dropout's backward) in one pass."""
    return g * (_bits(packed, g).to(g.dtype) * scale)


def unpack_where(g: Tensor, packed: Tensor) -> Tensor:
    """``g.masked_fill(~unpack(packed), 0)`` (the ReLU's backward) in one pass."""
    return torch.where(_bits(packed, g) != 0, g, torch.zeros_like(g))
