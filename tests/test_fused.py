"""The GPU's fused elementwise chains (:mod:`gnnpipe.models.fused`) are bit-identical to the
eager paths of :mod:`gnnpipe.models.ops`: as plain functions, compiled by ``torch.compile`` on
this CPU (marker ``slow``: Inductor's C++ build takes a minute), and wired into the dropout
and ReLU exactly where a CUDA tensor would take them."""

from __future__ import annotations

import logging
import shutil

import pytest
import torch

from gnnpipe import GnnpipeError
from gnnpipe.models import fused, ops

LOW = (1 << ops._KEEP_BITS) - 1


def _keys(n: int, c: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    return (torch.randint(-2**31, 2**31 - 1, (n,), dtype=torch.int32, generator=g),
            torch.randint(-2**31, 2**31 - 1, (c,), dtype=torch.int32, generator=g))


def _eager_keep(r, c, thresh):
    e = ops._lowbias32_(r[:, None] ^ c[None, :])
    return e.bitwise_and_(LOW) >= thresh


def _cases(fn_of):
    """(name, fused function, args, eager result) for odd and even sizes."""
    out = []
    for n, c, p in ((1, 1, 0.5), (37, 13, 0.1), (300, 64, 0.9)):
        r, k = _keys(n, c, n)
        thresh = int(round(p * (1 << ops._KEEP_BITS)))
        keep = _eager_keep(r, k, thresh)
        out.append(("keep_from_keys", fn_of(fused.keep_from_keys), (r, k, thresh, LOW), keep))
        flat = keep.reshape(-1).view(torch.uint8)
        pad = (-flat.numel()) % 8
        f = torch.cat([flat, flat.new_zeros(pad)]).view(-1, 8)
        out.append(("pack8", fn_of(fused.pack8), (f,), ops.pack_bits(keep)))
        h = torch.randn(n, c, generator=torch.Generator().manual_seed(c))
        h.view(-1)[::5] = float("nan")
        h.view(-1)[1::7] = -0.0
        scale = 1.0 / (1.0 - p)
        out.append(("keep_mul", fn_of(fused.keep_mul), (h, keep, scale), h * keep.to(h.dtype).mul_(scale)))
        packed = ops.pack_bits(keep)
        out.append(("unpack_mul", fn_of(fused.unpack_mul), (h, packed, scale),
                    h * ops.unpack_bits(packed, keep.shape).to(h.dtype).mul_(scale)))
        out.append(("unpack_where", fn_of(fused.unpack_where), (h, packed),
                    h.masked_fill(ops.unpack_bits(packed, keep.shape).logical_not_(), 0)))
    return out


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-equal (NaNs and the sign of zero included)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.is_floating_point():
        return torch.equal(a.view(torch.int32), b.view(torch.int32))
    return torch.equal(a, b)


def test_fused_functions_equal_the_eager_ops():
    for name, fn, args, want in _cases(lambda f: f):
        assert _same(fn(*args), want), name


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                    reason="torch.compile on the CPU needs a C compiler (none on PATH)")
def test_fused_functions_compiled_equal_the_eager_ops():
    """What a GPU runs is Inductor's code for these functions: compiled here for the CPU, with
    dynamic shapes as on the GPU, every case is bit-equal to the eager ops."""
    torch._dynamo.reset()
    compiled = {}

    def fn_of(f):
        return compiled.setdefault(f.__name__, torch.compile(f, dynamic=True))

    for name, fn, args, want in _cases(fn_of):
        assert _same(fn(*args), want), name


def test_a_function_that_fails_to_compile_runs_eagerly_and_says_so(monkeypatch, caplog):
    def broken(fn, **kw):
        def run(*a):
            raise RuntimeError("inductor: no backend for this device")
        return run

    monkeypatch.setattr(torch, "compile", broken)
    monkeypatch.setattr(fused, "_COMPILED", {})
    monkeypatch.setattr(fused, "_FAILED", set())
    r, c = _keys(20, 9, 1)
    with caplog.at_level(logging.WARNING, logger="gnnpipe.models.fused"):
        got = fused.call(fused.keep_from_keys, r, c, 1000, LOW)
        again = fused.call(fused.keep_from_keys, r, c, 1000, LOW)
    assert torch.equal(got, _eager_keep(r, c, 1000)) and torch.equal(again, got)
    warnings = [rec for rec in caplog.records if "keep_from_keys" in rec.getMessage()]
    assert len(warnings) == 1 and "eagerly" in warnings[0].getMessage()


def test_gnnpipe_compile_0_turns_the_fused_path_off(monkeypatch):
    t = torch.zeros(2)
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    assert fused.enabled(t)
    monkeypatch.setenv("GNNPIPE_COMPILE", "0")
    assert not fused.enabled(t)
    for off in ("false", "OFF", "no"):
        monkeypatch.setenv("GNNPIPE_COMPILE", off)
        assert not fused.enabled(t)
    monkeypatch.setenv("GNNPIPE_COMPILE", "flase")
    with pytest.raises(GnnpipeError, match=r"GNNPIPE_COMPILE='flase': expected 1 .*0 .*force"):
        fused.enabled(t)


def test_dropout_and_relu_take_the_fused_path_where_enabled_with_equal_results(monkeypatch):
    """As on a GPU (``fused.enabled`` true, ``fused.call`` eager here): the mask, its packing,
    the forward and both backwards go through the fused functions and give the same bits."""
    def run():
        h = torch.randn(50, 24, generator=torch.Generator().manual_seed(3), requires_grad=True)
        gid = torch.arange(100, 150)
        y = ops.relu(ops.hashed_dropout(h, gid, 0.4, 7, 2, 5))
        g = torch.randn(50, 24, generator=torch.Generator().manual_seed(4))
        y.backward(g)
        return y.detach(), h.grad

    want = run()
    used = []
    monkeypatch.setattr(fused, "enabled", lambda t: True)
    monkeypatch.setattr(fused, "call", lambda fn, *a: used.append(fn.__name__) or fn(*a))
    got = run()
    assert all(_same(a, b) for a, b in zip(got, want))
    assert set(used) == {"keep_from_keys", "pack8", "keep_mul", "unpack_mul", "unpack_where"}, used
