"""Fast primitives shared by both layer libraries: CSR aggregation and hashed dropout.

Why hand-written: on the CPUs this project targets, PyG's default ``edge_index``
gather/scatter aggregation is ~60x slower than ``torch.sparse.mm`` on a CSR matrix, and
plain autograd through ``torch.sparse.mm`` rebuilds the transposed CSR in every backward
(~17 ms per layer on Squirrel). :func:`csr_mm` multiplies by a CSR matrix whose transpose is
built once and cached by the caller (on the :class:`~gnnpipe.models.block.Block`), so a
layer's backward costs one SpMM, like its forward.

Dropout masks are a pure function of ``(seed, epoch, unit index, global node id, column)``
computed by a counter-based integer hash, so that the same node keeps the same mask whether
it is processed by one process, by one of several graph partitions, or in a pipeline chunk.
"""

from __future__ import annotations

import math
import sys

import torch
from torch import Tensor

from gnnpipe.models import fused

_M32 = 0xFFFFFFFF
_MIX_C = 0x45D9F3B  # < 2**27: x * _MIX_C < 2**59 for x < 2**32, so int64 products never overflow
# Dropout compares 24 hash bits with p * 2**24: keep-rate resolution 6e-8.
_KEEP_BITS = 24
#: On a CPU, :func:`keep_mask` hashes a block of rows of about this many values at a time, so
#: the hash's int32 temporaries (a dozen passes over them) stay in a core's cache (2 MiB of L2
#: here). ``python scripts/bench_hash.py`` (one thread, CPU time; 2026-12-07, load 1.2):
#: [5201 x 2089] (Squirrel's input features) 60 M values/s in one block, 464 M/s in blocks of
#: 2**19 values; [50000 x 100] 175 against 462 M/s. The masks are the same: each entry depends
#: on (stream, id, column) only.
HASH_BLOCK_VALUES = 1 << 19


def _mix64_py(x: int) -> int:
    """splitmix64 finaliser on Python ints (exact 64-bit arithmetic)."""
    x &= (1 << 64) - 1
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & ((1 << 64) - 1)
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & ((1 << 64) - 1)
    x ^= x >> 31
    return x


def stream_keys(seed: int, epoch: int, unit: int) -> tuple[int, int]:
    """Two 32-bit keys (rows, columns) of the dropout stream ``(seed, epoch, unit)``."""
    k = _mix64_py(_mix64_py(_mix64_py(int(seed) & ((1 << 64) - 1)) ^ int(epoch)) ^ (int(unit) << 20))
    return k & _M32, (k >> 32) & _M32


def _mix32_i64(x: Tensor) -> Tensor:
    """In-place 32-bit integer mix on an int64 tensor holding values in [0, 2**32).

    Every product stays below 2**59, so the int64 arithmetic is exact (no reliance on
    overflow behaviour).
    """
    x ^= x >> 16
    x.mul_(_MIX_C).bitwise_and_(_M32)
    x ^= x >> 16
    x.mul_(_MIX_C).bitwise_and_(_M32)
    x ^= x >> 16
    return x


def _to_i32(x: Tensor) -> Tensor:
    """int64 in [0, 2**32) -> int32 with the same bit pattern (explicit, no narrowing UB)."""
    return torch.where(x >= (1 << 31), x - (1 << 32), x).to(torch.int32)


def row_keys(gid: Tensor, key: int) -> Tensor:
    """int32 [n] per-node hash of global ids ``gid`` under stream key ``key``."""
    g = gid.to(torch.int64)
    x = (g & _M32) ^ key
    x = _mix32_i64(x)
    x += (g >> 32) & _M32  # ids >= 2**32 still get distinct keys
    x.bitwise_and_(_M32)
    return _to_i32(_mix32_i64(x))


def _lowbias32_(e: Tensor) -> Tensor:
    """In-place lowbias32 (C. Wellons) on int32 tensors.

    The multiplies wrap modulo 2**32 (two's-complement, as ATen's integer kernels do on CPU
    and CUDA); right shifts are arithmetic on int32, so their sign-extended bits are masked
    off to give logical shifts. ``tests/test_models.py`` checks the result against a pure
    Python implementation with explicit ``mod 2**32`` arithmetic.
    """
    e ^= (e >> 16) & 0xFFFF
    e.mul_(0x7FEB352D)
    e ^= (e >> 15) & 0x1FFFF
    e.mul_(0x846CA68B - (1 << 32))
    e ^= (e >> 16) & 0xFFFF
    return e


def keep_mask(gid: Tensor, num_cols: int, p: float, seed: int, epoch: int, unit: int) -> Tensor:
    """Bernoulli(1-p) keep mask of a dense block of rows.

    Args:
        gid: int64 [n] global node id of each row.
        num_cols: number of columns.
        p: drop probability in [0, 1).
        seed, epoch, unit: the dropout stream.

    Returns:
        bool [n, num_cols]; entry (i, j) depends only on (seed, epoch, unit, gid[i], j).
    """
    kr, kc = stream_keys(seed, epoch, unit)
    r = row_keys(gid, kr)
    c = row_keys(torch.arange(num_cols, device=gid.device), kc)
    thresh = int(round(p * (1 << _KEEP_BITS)))
    if fused.enabled(r):  # one kernel on a GPU instead of ~13 passes
        return fused.call(fused.keep_from_keys, r, c, thresh, (1 << _KEEP_BITS) - 1)
    n = r.shape[0]
    step = hash_block_rows(num_cols)
    if n <= step or r.device.type != "cpu":
        return _keep_from_keys(r, c, thresh)
    out = torch.empty(n, num_cols, dtype=torch.bool, device=r.device)
    for lo in range(0, n, step):
        out[lo : lo + step] = _keep_from_keys(r[lo : lo + step], c, thresh)
    return out


def hash_block_rows(num_cols: int) -> int:
    """Rows of ``num_cols`` columns a CPU hashes at a time (about :data:`HASH_BLOCK_VALUES` values)."""
    return max(1, HASH_BLOCK_VALUES // max(num_cols, 1))


def _keep_from_keys(r: Tensor, c: Tensor, thresh: int) -> Tensor:
    """bool [len(r), len(c)]: the keep mask of row keys ``r`` and column keys ``c``."""
    e = _lowbias32_(r[:, None] ^ c[None, :])
    return e.bitwise_and_((1 << _KEEP_BITS) - 1) >= thresh


def keep_mask_sparse(
    row_gid: Tensor, cols: Tensor, num_cols: int, p: float, seed: int, epoch: int, unit: int
) -> Tensor:
    """Keep mask of stored values of a sparse matrix: same rule as :func:`keep_mask`.

    Args:
        row_gid: int64 [nnz] global node id of each stored value's row.
        cols: int64 [nnz] column of each stored value.

    Returns:
        bool [nnz], equal to ``keep_mask(...)[row, col]`` for every stored value.
    """
    kr, kc = stream_keys(seed, epoch, unit)
    r = row_keys(row_gid, kr)
    c = row_keys(torch.arange(num_cols, device=cols.device), kc)
    e = _lowbias32_(r ^ c[cols.to(torch.int64)])
    return e.bitwise_and_((1 << _KEEP_BITS) - 1) >= int(round(p * (1 << _KEEP_BITS)))


class KeepMaskCache:
    """Every node's keep-mask of a dropout stream, hashed once and kept bit-packed by row.

    A pipeline stage reads a node's row in every chunk that neighbours it (on Squirrel with
    16 chunks, 4.9 times per unit and epoch), and :func:`keep_mask` would hash the row again
    each time: hashing costs about as much as the unit's sparse aggregation. With a cache
    the stage hashes every node once per unit and epoch (in blocks of rows, so the int32
    temporaries stay small) and each chunk gathers its rows' packed bits. The masks are
    exactly :func:`keep_mask`'s (a function of the stream and the global id alone).

    Args:
        num_nodes: global ids lie in ``[0, num_nodes)``.
        max_bytes: the packed masks held at once; a stream that would exceed it is not
            cached (``get`` returns None and the caller hashes as before).
    """

    BLOCK_ROWS = 1 << 16

    def __init__(self, num_nodes: int, max_bytes: int = 256 * 2**20) -> None:
        self.num_nodes, self.max_bytes = int(num_nodes), int(max_bytes)
        self._packed: dict[tuple, Tensor] = {}

    def clear(self) -> None:
        """Forget every mask (a stage calls it when its forwards of an epoch are done)."""
        self._packed.clear()

    @property
    def nbytes(self) -> int:
        return sum(t.numel() for t in self._packed.values())

    def get(self, gid: Tensor, num_cols: int, p: float, seed: int, epoch: int, unit: int) -> Tensor | None:
        """``keep_mask(gid, num_cols, p, seed, epoch, unit)``, or None when not cached."""
        key = (num_cols, p, seed, epoch, unit)
        packed = self._packed.get(key)
        width = (num_cols + 7) // 8
        if packed is None:
            if self.nbytes + self.num_nodes * width > self.max_bytes:
                return None
            packed = torch.empty(self.num_nodes, width, dtype=torch.uint8, device=gid.device)
            step = self.BLOCK_ROWS  # (on a CPU, rows that keep the hash and the packing in cache)
            if gid.device.type == "cpu":
                step = min(step, hash_block_rows(num_cols))
            for lo in range(0, self.num_nodes, step):
                hi = min(lo + step, self.num_nodes)
                keep = keep_mask(torch.arange(lo, hi, device=gid.device), num_cols, p, seed, epoch, unit)
                if width * 8 != num_cols:
                    keep = torch.nn.functional.pad(keep, (0, width * 8 - num_cols))
                packed[lo:hi] = pack_bits(keep).view(hi - lo, width)
            self._packed[key] = packed
        rows = packed.index_select(0, gid.to(torch.int64))
        return unpack_bits(rows.reshape(-1), (rows.shape[0], width * 8))[:, :num_cols]


def hashed_dropout(h: Tensor, gid: Tensor, p: float, seed: int, epoch: int, unit: int,
                   masks: KeepMaskCache | None = None) -> Tensor:
    """Dropout with masks from :func:`keep_mask`, scaled by 1/(1-p).

    Args:
        h: [n, C] dense rows, or a torch sparse CSR matrix [n, C] (bag-of-words features:
            stored values are dropped and the sparsity pattern kept, so it never densifies).
        gid: int64 [n] global node id of each row.
        masks: a :class:`KeepMaskCache` to take dense masks from (the same masks, hashed
            once per node); None hashes these rows.

    Returns:
        Tensor of the same shape and layout as ``h``.
    """
    if p <= 0.0:
        return h
    scale = 1.0 / (1.0 - p)
    if h.layout == torch.sparse_csr:
        crow, col, val = h.crow_indices(), h.col_indices(), h.values()
        counts = crow[1:] - crow[:-1]
        row_gid = torch.repeat_interleave(gid.to(torch.int64), counts)
        keep = keep_mask_sparse(row_gid, col, h.shape[1], p, seed, epoch, unit)
        new = val * keep.to(val.dtype).mul_(scale)
        return torch.sparse_csr_tensor(crow, col, new, h.shape)
    keep = masks.get(gid, h.shape[1], p, seed, epoch, unit) if masks is not None else None
    if keep is None:
        keep = keep_mask(gid, h.shape[1], p, seed, epoch, unit)
    if h.requires_grad and torch.is_grad_enabled():
        return _HashedDropout.apply(h, keep, p)
    if fused.enabled(h):
        return fused.call(fused.keep_mul, h, keep, scale)
    return h * keep.to(h.dtype).mul_(scale)


_BIT_SHIFTS = torch.arange(8, dtype=torch.uint8)
# n * _SPREAD puts bit j of a nibble n at bits j + 7k (k = 0..3), all distinct (no carries),
# and 0x01010101 keeps bits 0, 8, 16, 24: bit j lands in byte j. Values stay below 2**25.
_SPREAD = 0x204081
_LITTLE = sys.byteorder == "little"


def pack_bits(mask: Tensor) -> Tensor:
    """Pack a bool tensor 8 values per byte.

    Args:
        mask: bool tensor of any shape.

    Returns:
        uint8 [ceil(numel / 8)]: bit ``j`` of byte ``i`` is ``mask.flatten()[8 i + j]``;
        the padding bits of the last byte are 0. :func:`unpack_bits` inverts it.
    """
    flat = mask.reshape(-1).view(torch.uint8)  # bools are bytes 0 / 1
    pad = (-flat.numel()) % 8
    if pad:
        flat = torch.cat([flat, flat.new_zeros(pad)])
    f = flat.view(-1, 8)
    if fused.enabled(f):
        return fused.call(fused.pack8, f)
    out = f[:, 0].clone()
    for j in range(1, 8):
        out |= f[:, j] << j
    return out


def unpack_bits(packed: Tensor, shape: torch.Size) -> Tensor:
    """bool tensor of ``shape`` from :func:`pack_bits`'s bytes."""
    n = math.prod(shape)
    if _LITTLE:
        q = packed.to(torch.int32)
        x = torch.stack([q & 0xF, q >> 4], 1)
        bits = x.mul_(_SPREAD).bitwise_and_(0x01010101).view(-1).view(torch.uint8)
    else:  # pragma: no cover - big-endian hosts
        bits = (packed[:, None] >> _BIT_SHIFTS.to(packed.device)).bitwise_and_(1).view(-1)
    return bits[:n].view(torch.bool).view(shape)


class _HashedDropout(torch.autograd.Function):
    """Dense hashed dropout that saves its keep-mask bit-packed instead of a float mask.

    Plain ``h * mask`` makes autograd keep the float mask, as large as ``h`` itself, for
    every dropout until the backward (in a pipeline: every chunk's until the flush). This
    keeps the keep-mask packed 8 values per byte (:func:`pack_bits`: 1/32 of the float
    mask) and rebuilds the same float multiplier in backward, multiplying exactly as
    autograd's ``mul`` would: bit-identical gradients. (Recomputing the hash in backward
    would save the last bit too, but the hash costs about 10x the multiply on this CPU.)
    """

    @staticmethod
    def forward(ctx, h, keep, p):  # type: ignore[override]
        ctx.save_for_backward(pack_bits(keep))
        ctx.p, ctx.shape = p, keep.shape
        if fused.enabled(h):
            return fused.call(fused.keep_mul, h, keep, 1.0 / (1.0 - ctx.p))
        return h * keep.to(h.dtype).mul_(1.0 / (1.0 - ctx.p))

    @staticmethod
    def backward(ctx, g):  # type: ignore[override]
        (packed,) = ctx.saved_tensors
        if fused.enabled(g) and g.shape == ctx.shape:
            return fused.call(fused.unpack_mul, g.contiguous(), packed, 1.0 / (1.0 - ctx.p)), None, None
        keep = unpack_bits(packed, ctx.shape)
        return g * keep.to(g.dtype).mul_(1.0 / (1.0 - ctx.p)), None, None


class _ReLU(torch.autograd.Function):
    """ReLU that saves one bit per value (output > 0) instead of the float output.

    ``torch.relu`` keeps its float output for backward (4 bytes per value); its backward
    is ``threshold_backward``: ``0 if out <= 0 else grad``. This keeps the packed bits of
    ``not (out <= 0)`` (NaN outputs pass the gradient, as there) and applies the same
    selection: bit-identical gradients.
    """

    @staticmethod
    def forward(ctx, x):  # type: ignore[override]
        out = torch.relu(x)
        ctx.save_for_backward(pack_bits(out.le(0).logical_not_()))
        ctx.shape = out.shape
        return out

    @staticmethod
    def backward(ctx, g):  # type: ignore[override]
        (packed,) = ctx.saved_tensors
        if fused.enabled(g) and g.shape == ctx.shape:
            return fused.call(fused.unpack_where, g.contiguous(), packed)
        return g.masked_fill(unpack_bits(packed, ctx.shape).logical_not_(), 0)


def relu(x: Tensor) -> Tensor:
    """``torch.relu`` whose autograd graph keeps 1 bit per value instead of 4 bytes."""
    if x.requires_grad and torch.is_grad_enabled() and x.layout == torch.strided:
        return _ReLU.apply(x)
    return torch.relu(x)


# ---------------------------------------------------------------------- CSR aggregation
class _CSRMM(torch.autograd.Function):
    """out = A @ x with A a constant CSR matrix; backward uses the cached A^T."""

    @staticmethod
    def forward(ctx, x: Tensor, a: Tensor, at: Tensor) -> Tensor:  # type: ignore[override]
        ctx.at = at
        return torch.sparse.mm(a, x)

    @staticmethod
    def backward(ctx, g: Tensor):  # type: ignore[override]
        gx = torch.sparse.mm(ctx.at, g.contiguous()) if ctx.needs_input_grad[0] else None
        return gx, None, None


def csr_mm(a: Tensor, at: Tensor, x: Tensor) -> Tensor:
    """Multiply a constant CSR matrix by dense rows, with a cached transpose for backward.

    Args:
        a: torch sparse CSR [m, n] (no gradient flows into its values).
        at: its transpose as sparse CSR [n, m] (may be ``a`` itself when symmetric).
        x: dense [n, k].

    Returns:
        dense [m, k].
    """
    return _CSRMM.apply(x.contiguous(), a, at)


class _CSRValuesMM(torch.autograd.Function):
    """Multi-head weighted aggregation out[:, h] = A_h @ x[:, h] with A_h's values trainable.

    ``values`` [nnz, H] sit on a fixed CSR pattern (crow, col) whose transpose pattern and
    permutation are cached by the caller. Used by GAT, whose attention coefficients are the
    CSR values.
    """

    @staticmethod
    def forward(ctx, values, x, crow, col, rows, tcrow, tcol, perm, num_dst):  # type: ignore[override]
        n_src, heads, ch = x.shape
        out = x.new_empty(num_dst, heads, ch)
        for h in range(heads):
            a = torch.sparse_csr_tensor(crow, col, values[:, h].contiguous(), (num_dst, n_src))
            out[:, h] = torch.sparse.mm(a, x[:, h].contiguous())
        ctx.save_for_backward(values, x)
        ctx.meta = (crow, col, rows, tcrow, tcol, perm, num_dst)
        return out

    @staticmethod
    def backward(ctx, g):  # type: ignore[override]
        values, x = ctx.saved_tensors
        crow, col, rows, tcrow, tcol, perm, num_dst = ctx.meta
        n_src, heads, ch = x.shape
        gv = gx = None
        if ctx.needs_input_grad[0]:
            # SDDMM: d out[v] / d a_uv = x[u]; one gather per endpoint, E x H x C.
            gv = (g[rows] * x[col]).sum(-1)
        if ctx.needs_input_grad[1]:
            gx = x.new_empty(x.shape)
            vt = values[perm]
            for h in range(heads):
                at = torch.sparse_csr_tensor(tcrow, tcol, vt[:, h].contiguous(), (n_src, num_dst))
                gx[:, h] = torch.sparse.mm(at, g[:, h].contiguous())
        return gv, gx, None, None, None, None, None, None, None


def csr_values_mm(values: Tensor, x: Tensor, pattern: tuple, num_dst: int) -> Tensor:
    """Aggregate ``x`` [n_src, H, C] with per-head trainable CSR values [nnz, H].

    Args:
        pattern: ``(crow, col, rows, tcrow, tcol, perm)`` from
            :meth:`gnnpipe.models.block.Block.csr_with_self_loops`.

    Returns:
        [num_dst, H, C].
    """
    return _CSRValuesMM.apply(values, x, *pattern, num_dst)


class CsrTranspose:
    """The transpose of a constant sparse CSR input, as CSR, its pattern computed once.

    Features are constant and dropout keeps their sparsity pattern, so the transpose's
    pattern is computed once per feature matrix (keyed by its column indices' storage and
    shape); only the values are permuted per call. Call it with the matrix: ``xt = tr(x)``.
    """

    def __init__(self) -> None:
        self._ent: tuple | None = None

    def __call__(self, x: Tensor) -> Tensor:
        col = x.col_indices()
        key = (col.data_ptr(), col.numel(), tuple(x.shape))
        ent = self._ent
        if ent is None or ent[0] != key:
            crow = x.crow_indices()
            n, f = x.shape
            rows = torch.repeat_interleave(torch.arange(n, device=col.device), crow[1:] - crow[:-1])
            perm = torch.argsort(col, stable=True)
            tcrow = torch.zeros(f + 1, dtype=torch.int64, device=col.device)
            torch.cumsum(torch.bincount(col, minlength=f), 0, out=tcrow[1:])
            # Keep ``col`` referenced so its memory (and data_ptr) cannot be reused while cached.
            ent = self._ent = (key, col, tcrow, rows[perm], perm)
        _, _, tcrow, tcol, perm = ent
        return torch.sparse_csr_tensor(tcrow, tcol, x.values()[perm], (x.shape[1], x.shape[0]))


class _SparseLinear(torch.autograd.Function):
    """x @ W^T for a constant sparse CSR ``x``; gradient only for W."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, transpose) -> Tensor:  # type: ignore[override]
        ctx.x = x
        ctx.transpose = transpose
        return torch.sparse.mm(x, weight.t().contiguous())

    @staticmethod
    def backward(ctx, g: Tensor):  # type: ignore[override]
        gw = None
        if ctx.needs_input_grad[1]:
            # dW = g^T x = (x^T g)^T. A cached transposed CSR makes this one SpMM (25 ms
            # on Physics); torch's CSC path (x.t()) takes 75-120 ms.
            xt = ctx.transpose(ctx.x) if ctx.transpose is not None else ctx.x.t()
            gw = torch.sparse.mm(xt, g.contiguous()).t()
        return None, gw, None


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None, transpose=None) -> Tensor:
    """``F.linear`` that also takes a sparse CSR input (features stay sparse).

    Args:
        x: [n, F] dense or torch sparse CSR (no gradient flows into a sparse ``x``).
        weight: [out, F]; bias: [out] or None.
        transpose: for sparse ``x``, a callable returning ``x``'s transpose as CSR
            (e.g. :meth:`Block.sparse_transpose_for`, which caches the pattern).

    Returns:
        dense [n, out].
    """
    if x.layout == torch.sparse_csr:
        out = _SparseLinear.apply(x, weight, transpose)
        return out + bias if bias is not None else out
    return torch.nn.functional.linear(x, weight, bias)
