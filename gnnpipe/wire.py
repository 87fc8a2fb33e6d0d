"""Wire formats for boundary messages: rows of embeddings or gradients as bytes (issue 20).

A message of ``n`` rows of width ``d`` is a uint8 tensor ``[n, row_bytes(d, fmt)]``: one
wire row per embedding row, so a message can be sliced by rows (per peer, per chunk) before
or after encoding, and an all-to-all moves plain bytes. Pure tensor code: nothing here
communicates, and every tensor is made on the input's device.

Layout of one wire row (byte offsets; multi-byte fields are in the host's byte order, which
is little-endian on every machine gnnpipe runs on: x86-64, aarch64, CUDA)::

    float32   [0, 4d)        the d float32 values, bit for bit              row_bytes = 4 d
    bfloat16  [0, 2d)        the d values rounded to bfloat16               row_bytes = 2 d
    int8      [0, 4)         scale  s, float32                             row_bytes = 8 + d
              [4, 8)         offset o, float32
              [8, 8 + d)     code q_j in 0..255 of column j, one byte each
    int4      [0, 4), [4, 8) scale s, offset o, float32, as for int8        row_bytes = 8 + ceil(d / 2)
              [8 + j // 2]   code q_j in 0..15: even j in the low nibble
                             (bits 0-3), odd j in the high nibble (bits 4-7); for odd d the
                             high nibble of the row's last byte is 0 (padding is per row, so
                             rows stay independently sliceable)

``float32`` is lossless (for a contiguous float32 input, :func:`encode` is a zero-copy byte
view, and :func:`decode` a zero-copy float view of the buffer). ``bfloat16`` rounds to
nearest, ties to even (``Tensor.to(torch.bfloat16)``); NaN and ±Inf pass through, finite
values beyond bfloat16's range become ±Inf.

Integer formats (``L = 255`` for int8, ``15`` for int4) quantise each row affinely, with
float32 arithmetic specified exactly so that any implementation produces the same bytes:

- ``o = min_j x_j``; ``s = (max_j x_j - o) / L``, both operations in float32 (no float64
  anywhere, so the codec also runs on devices without it).
- ``t_j = min(max(float32(float32(x_j - o) * r), 0), L)`` with
  ``r = min(float32(1 / s), FLT_MAX)`` (so a constant row, s = 0, has t = 0).
- Stochastic rounding: ``q_j = floor(t_j) + [u_j < t_j - floor(t_j)]`` where ``u_j = k_j / 2**24``
  and ``k_j`` is the low 24 bits of the keyed hash below. ``P(round up)`` is the fraction
  rounded up to a multiple of 2**-24, so ``E[q_j] = t_j`` to within 2**-24 of a step: the
  decoded row is unbiased (up to float32 rounding of ``t`` itself, ~1e-7 of the range).
- Decoding: ``x'_j = float32(o + float32(s * q_j))`` (a multiply, then an add; no fused
  multiply-add, so CPU and reference agree bit for bit). ``|x_j - x'_j| <= s`` plus float32
  rounding of the values themselves.

Why affine (scale and offset) rather than a symmetric scale: the affine step is
``(max - min) / L``, the symmetric one ``2 max|x| / L``, which is never smaller, and is twice
as large for the rows that dominate forward traffic: post-ReLU activations are >= 0, so a
symmetric code wastes its negative half (one bit: int4 would round to 8 levels instead of 16).
For zero-centred gradient rows the two are equal. The offset costs 4 bytes per row (d = 100:
108 instead of 104 bytes in int8; 58 instead of 54 in int4). The header stays float32:
bfloat16 or float16 headers lose the offset's precision (a row 1000 ± 1e-3 needs an offset
exact to better than its step) or the range (gradients of 1e-9).

Keying (reproducible, and independent of how rows are split over ranks or chunks): the hash
is a pure function of ``(seed, epoch, site, gid_i, j)``, with ``gid_i`` the row's ORIGINAL
global node id and ``j`` its column, built as :mod:`gnnpipe.models.ops` builds its dropout
masks, on a stream of its own::

    kr, kc = stream_keys(seed, epoch, 2**40 + site)
    k_ij   = lowbias32(row_keys(gid_i, kr) ^ row_keys(j, kc)) & (2**24 - 1)

Dropout units are small integers, so no wire stream is a dropout stream and rounding noise
never correlates with a dropout mask. ``site`` (0 <= site < 2**40) names the message in the
epoch (layer, direction, ...): the same row sent at the same site rounds the same way on any
rank, and independently at different sites.

Non-finite input: float32 and bfloat16 carry NaN and ±Inf per element. An integer-format row
holding any NaN or ±Inf, or whose range ``max - min`` overflows float32 (values beyond about
±1.7e38), is sent with ``s = o = NaN`` and codes 0: the whole row decodes as NaN, so the
trainer's non-finite check still fires on the receiving side.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from gnnpipe.config import WIRE_FORMATS  # the one list (``--wire``'s choices); re-exported
from gnnpipe.models.ops import _lowbias32_, row_keys, stream_keys

__all__ = ["WIRE_FORMATS", "FLOAT32", "Wire", "check_format", "decode", "encode", "is_lossy",
           "message_site", "row_bytes", "wire_keys"]

# Integer formats: the largest code (levels - 1).
_LEVELS = {"int8": 255, "int4": 15}
_HEADER_BYTES = 8  # scale, offset: two float32
# Wire rounding streams live above every dropout unit: stream_keys(seed, epoch, _SITE_BASE + site).
_SITE_BASE = 1 << 40
_U_BITS = 24
_FLT_MAX = torch.finfo(torch.float32).max
# Values per block of rows in the integer encoder (float32 temporaries of 1 MiB each).
_BLOCK_VALUES = 1 << 18


def check_format(fmt: str) -> str:
    """``fmt`` if it is a wire format, else ``ValueError`` naming the choices."""
    if fmt not in WIRE_FORMATS:
        raise ValueError(f"wire format {fmt!r} is not one of {', '.join(WIRE_FORMATS)}")
    return fmt


def is_lossy(fmt: str) -> bool:
    """Whether ``fmt`` changes values (everything but float32)."""
    return check_format(fmt) != "float32"


def row_bytes(d: int, fmt: str) -> int:
    """Bytes one row of width ``d`` occupies on the wire, header included.

    float32: ``4 d``; bfloat16: ``2 d``; int8: ``8 + d``; int4: ``8 + ceil(d / 2)``.
    """
    check_format(fmt)
    d = int(d)
    if d < 0:
        raise ValueError(f"row width d must be >= 0, got {d}")
    if fmt == "float32":
        return 4 * d
    if fmt == "bfloat16":
        return 2 * d
    if fmt == "int8":
        return _HEADER_BYTES + d
    return _HEADER_BYTES + (d + 1) // 2


def wire_keys(seed: int, epoch: int, site: int) -> tuple[int, int]:
    """The two 32-bit keys (rows, columns) of the rounding stream of one message site."""
    site = int(site)
    if not 0 <= site < _SITE_BASE:
        raise ValueError(f"wire site must be in [0, 2**40), got {site}")
    return stream_keys(seed, epoch, _SITE_BASE + site)


# Message kinds of a wire site (:func:`message_site`).
#: graph-parallel halos and the exact hybrid's halo between ways (:class:`HaloExchanger`)
KIND_HALO = 1
#: the stale hybrid's rows between ways (``WayLink.push``) and their gradients
KIND_WAY = 2
#: pipeline chunk activations ``[h | carry]`` between stages and their gradients
KIND_PIPE = 3
#: a one-chunk epoch's carry tensors, each its own message (``parallel/pipeline/carry.py``):
#: kind ``KIND_CARRY + i`` for the boundary's ``i``-th carry key, ``i < MAX_CARRY_KEYS``
KIND_CARRY = 4
MAX_CARRY_KEYS = 16


def message_site(kind: int, unit: int, backward: bool) -> int:
    """The rounding site of one message kind at one layer unit and direction.

    ``(kind << 32) | (unit << 1) | backward``: distinct per (kind, unit, direction), and a
    function of the global unit index only, so every rank (every way, every stage) derives
    the same site for the same message. ``unit`` is the model's unit index of the layer the
    rows are read by: the aggregating unit for halos, the receiving stage's first unit for
    pipeline chunks.
    """
    if not KIND_HALO <= kind < KIND_CARRY + MAX_CARRY_KEYS:
        raise ValueError(f"message kind must be in [{KIND_HALO}, {KIND_CARRY + MAX_CARRY_KEYS}), got {kind}")
    unit = int(unit)
    if not 0 <= unit < 1 << 31:
        raise ValueError(f"unit must be in [0, 2**31), got {unit}")
    return (kind << 32) | (unit << 1) | int(bool(backward))


@dataclass(frozen=True)
class Wire:
    """The wire format of a run's training messages (``--wire``) and the seed of its rounding.

    The small options value the executors are handed (:func:`gnnpipe.parallel.build.build_executor`);
    evaluation messages and the weight all-reduce never use it (they stay float32).
    """

    fmt: str = "float32"
    seed: int = 0

    def __post_init__(self) -> None:
        check_format(self.fmt)

    @property
    def lossy(self) -> bool:
        return is_lossy(self.fmt)

    def row_bytes(self, d: int) -> int:
        return row_bytes(d, self.fmt)

    def encode(self, rows: Tensor, *, epoch: int, site: int, gid: Tensor) -> Tensor:
        """:func:`encode` of ``rows`` keyed by this run's seed, ``epoch``, ``site`` and ``gid``."""
        if not self.lossy:
            return encode(rows, self.fmt)
        return encode(rows, self.fmt, seed=self.seed, epoch=epoch, site=site, gid=gid)

    def decode(self, buf: Tensor, d: int) -> Tensor:
        return decode(buf, d, self.fmt)


FLOAT32 = Wire()


def encode(rows: Tensor, fmt: str, *, seed: int | None = None, epoch: int | None = None,
           site: int | None = None, gid: Tensor | None = None) -> Tensor:
    """Rows as wire bytes.

    Args:
        rows: [n, d] floating rows (float32; bfloat16/float16 are widened first), any
            strides, any device.
        fmt: one of :data:`WIRE_FORMATS`.
        seed, epoch, site: the rounding stream (integer formats only; see the module
            docstring).
        gid: int64 [n] ORIGINAL global node id of each row (integer formats only).

    Returns:
        uint8 [n, row_bytes(d, fmt)] on ``rows.device``, laid out as in the module docstring.
        For float32 input and format, a view of ``rows`` when ``rows`` is contiguous.
    """
    check_format(fmt)
    if rows.dim() != 2 or not rows.is_floating_point():
        raise ValueError(f"encode: rows must be a 2-D floating tensor [n, d], got {tuple(rows.shape)} "
                         f"{rows.dtype}")
    n, d = rows.shape
    rows = rows.detach()  # the wire is not differentiable; callers route gradients themselves
    if fmt in ("float32", "bfloat16"):
        dt = getattr(torch, fmt)
        if rows.numel() == 0:  # views of empty tensors can have strides that forbid .view(dtype)
            return torch.empty((n, row_bytes(d, fmt)), dtype=torch.uint8, device=rows.device)
        return rows.to(dt).contiguous().view(torch.uint8)
    if seed is None or epoch is None or site is None or gid is None:
        raise ValueError(f"encode: format {fmt} rounds stochastically and needs seed, epoch, site and gid")
    if gid.shape != (n,) or gid.is_floating_point() or gid.device != rows.device:
        raise ValueError(f"encode: gid must be an integer tensor [{n}] on {rows.device}, got "
                         f"{tuple(gid.shape)} {gid.dtype} on {gid.device}")
    return _encode_int(rows.to(torch.float32), fmt, seed, epoch, site, gid)


def _encode_int(x: Tensor, fmt: str, seed: int, epoch: int, site: int, gid: Tensor) -> Tensor:
    n, d = x.shape
    L = _LEVELS[fmt]
    out = torch.empty((n, row_bytes(d, fmt)), dtype=torch.uint8, device=x.device)
    if d == 0:  # no values: a zero header, nothing to round
        out.zero_()
        return out
    lo = x.amin(dim=1)
    hi = x.amax(dim=1)
    rng = hi - lo
    # Not finite: a NaN or ±Inf in the row (amin/amax propagate NaN; Inf makes rng Inf or NaN),
    # or a finite range beyond float32 (rng overflows to Inf).
    bad = ~(rng <= _FLT_MAX)
    scale = rng.div_(L)
    off = lo.masked_fill(bad, math.nan)
    scale.masked_fill_(bad, math.nan)
    inv = torch.reciprocal(scale).clamp_(max=_FLT_MAX)
    out[:, :_HEADER_BYTES] = torch.stack([scale, off], dim=1).view(torch.uint8)
    kr, kc = wire_keys(seed, epoch, site)
    ckeys = row_keys(torch.arange(d, device=x.device), kc)
    # Blocks of rows: the five [rows, d] temporaries stay in cache and their memory bounded.
    step = max(1, _BLOCK_VALUES // d)
    for i in range(0, n, step):
        j = min(n, i + step)
        t = (x[i:j] - off[i:j, None]).mul_(inv[i:j, None])
        t.clamp_(0, L).nan_to_num_(nan=0.0)  # NaN only in bad rows, whose codes are zeroed below
        q = torch.floor(t)
        frac = t.sub_(q).mul_(float(1 << _U_BITS))  # exact: frac < 1 scaled by a power of two
        k = _lowbias32_(row_keys(gid[i:j], kr)[:, None] ^ ckeys[None, :])
        k = k.bitwise_and_((1 << _U_BITS) - 1).to(torch.float32)  # exact: k < 2**24
        q.add_(k < frac)
        q.masked_fill_(bad[i:j, None], 0)
        if fmt == "int8":
            out[i:j, _HEADER_BYTES:].copy_(q)
        else:
            codes = q.to(torch.uint8)
            if d % 2:
                codes = torch.nn.functional.pad(codes, (0, 1))
            torch.bitwise_or(codes[:, 0::2], codes[:, 1::2] << 4, out=out[i:j, _HEADER_BYTES:])
    return out


def _dense(buf: Tensor, size: int) -> Tensor:
    """``buf`` if it can be viewed as ``size``-byte elements, else a packed copy.

    ``Tensor.view(dtype)`` needs every stride but the last, and the storage offset, to be
    multiples of the new element size, which a contiguous slice of one row (stride 0 is
    free for a dimension of size 1) or of a column range need not satisfy.
    """
    if (buf.is_contiguous() and buf.storage_offset() % size == 0
            and all(s % size == 0 for s in buf.stride()[:-1])):
        return buf
    return torch.empty(buf.shape, dtype=buf.dtype, device=buf.device).copy_(buf)


def decode(buf: Tensor, d: int, fmt: str) -> Tensor:
    """Rows from wire bytes: the inverse of :func:`encode` (up to the format's rounding).

    Args:
        buf: uint8 [n, row_bytes(d, fmt)] (any row slice of an encoded message).
        d: row width.
        fmt: the format it was encoded in.

    Returns:
        float32 [n, d] on ``buf.device``. For float32, a view of ``buf`` when ``buf`` is
        contiguous (it shares memory with the receive buffer).
    """
    check_format(fmt)
    rb = row_bytes(d, fmt)
    if buf.dtype != torch.uint8 or buf.dim() != 2 or buf.shape[1] != rb:
        raise ValueError(f"decode: expected uint8 [n, {rb}] for d={d} in {fmt}, got "
                         f"{buf.dtype} {tuple(buf.shape)}")
    n = buf.shape[0]
    if fmt in ("float32", "bfloat16"):
        if buf.numel() == 0:
            return torch.empty((n, d), dtype=torch.float32, device=buf.device)
        return _dense(buf, 4 if fmt == "float32" else 2).view(getattr(torch, fmt)).to(torch.float32)
    hdr = _dense(buf[:, :_HEADER_BYTES], 4).view(torch.float32)  # [n, 2]: scale, offset
    codes = buf[:, _HEADER_BYTES:]
    if fmt == "int4":
        codes = torch.stack([codes & 0xF, codes >> 4], dim=2).view(n, 2 * codes.shape[1])[:, :d]
    out = codes.to(torch.float32).mul_(hdr[:, 0:1])
    return out.add_(hdr[:, 1:2])
