"""The wire codec (gnnpipe.wire) against an independent numpy reference.

The reference below re-derives every byte from the layout written in wire.py's docstring,
with numpy only: its own splitmix64 / 32-bit mix / lowbias32 hash (unsigned arithmetic, no
torch), its own affine quantiser and nibble packing. It shares no code with the module, so a
change of layout, keying or rounding in either shows up as a byte mismatch here.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gnnpipe import wire
from gnnpipe.wire import WIRE_FORMATS, decode, encode, row_bytes

FLT_MAX = np.float32(np.finfo(np.float32).max)
LEVELS = {"int8": 255, "int4": 15}
INT_FORMATS = ("int8", "int4")

# ---------------------------------------------------------------- numpy reference
M32, M64 = 0xFFFFFFFF, (1 << 64) - 1


def ref_splitmix(x: int) -> int:
    x &= M64
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & M64
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def ref_stream(seed: int, epoch: int, site: int) -> tuple[int, int]:
    unit = (1 << 40) + site  # wire streams sit above every dropout unit
    k = ref_splitmix(ref_splitmix(ref_splitmix(seed & M64) ^ epoch) ^ (unit << 20))
    return k & M32, k >> 32


def ref_mix32(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.uint64)
    for _ in range(2):
        x ^= x >> np.uint64(16)
        x = (x * np.uint64(0x45D9F3B)) & np.uint64(M32)
    return x ^ (x >> np.uint64(16))


def ref_keys(ids: np.ndarray, key: int) -> np.ndarray:
    g = ids.astype(np.uint64)
    x = ref_mix32((g & np.uint64(M32)) ^ np.uint64(key))
    x = (x + ((g >> np.uint64(32)) & np.uint64(M32))) & np.uint64(M32)
    return ref_mix32(x).astype(np.uint32)


def ref_lowbias32(e: np.ndarray) -> np.ndarray:
    e = e.astype(np.uint32)
    e ^= e >> np.uint32(16)
    e *= np.uint32(0x7FEB352D)
    e ^= e >> np.uint32(15)
    e *= np.uint32(0x846CA68B)
    return e ^ (e >> np.uint32(16))


def ref_u(gid: np.ndarray, d: int, seed: int, epoch: int, site: int) -> np.ndarray:
    """float64 [n, d] uniform thresholds k / 2**24."""
    kr, kc = ref_stream(seed, epoch, site)
    e = ref_lowbias32(ref_keys(gid, kr)[:, None] ^ ref_keys(np.arange(d), kc)[None, :])
    return (e & np.uint32(0xFFFFFF)).astype(np.float64) / 2.0**24


def ref_quant(x: np.ndarray, fmt: str):
    """(scale, offset, t, bad) of the affine quantiser, float32 as the docstring specifies."""
    L = LEVELS[fmt]
    x = x.astype(np.float32)
    with np.errstate(all="ignore"):
        lo, hi = x.min(axis=1), x.max(axis=1)
        rng = hi - lo  # float32
        bad = ~(rng <= FLT_MAX)
        scale = rng / np.float32(L)
        off = lo.copy()
        scale[bad] = np.nan
        off[bad] = np.nan
        inv = np.minimum(np.float32(1) / scale, FLT_MAX)
        t = (x - off[:, None]) * inv[:, None]
        t = np.clip(t, np.float32(0), np.float32(L))
    t[bad] = 0
    return scale, off, t, bad


def ref_encode(x: np.ndarray, fmt: str, seed=0, epoch=0, site=0, gid=None) -> np.ndarray:
    x = np.ascontiguousarray(x, dtype=np.float32)
    n, d = x.shape
    if fmt == "float32":
        return x.astype("<f4").view(np.uint8).reshape(n, 4 * d)
    if fmt == "bfloat16":
        b = x.view(np.uint32).astype(np.uint64)
        r = ((b + 0x7FFF + ((b >> np.uint64(16)) & np.uint64(1))) >> np.uint64(16)).astype("<u2")
        r[np.isnan(x)] = 0x7FC0
        return r.view(np.uint8).reshape(n, 2 * d)
    hdr = np.zeros((n, 2), "<f4")
    if d == 0:
        return hdr.view(np.uint8).reshape(n, 8)
    scale, off, t, bad = ref_quant(x, fmt)
    fl = np.floor(t)
    q = (fl + (ref_u(gid, d, seed, epoch, site) < (t - fl))).astype(np.uint8)
    q[bad] = 0
    hdr[:, 0], hdr[:, 1] = scale, off
    if fmt == "int4":
        if d % 2:
            q = np.concatenate([q, np.zeros((n, 1), np.uint8)], axis=1)
        q = q[:, 0::2] | (q[:, 1::2] << 4)
    return np.concatenate([hdr.view(np.uint8).reshape(n, 8), q], axis=1)


def ref_codes(buf: np.ndarray, d: int, fmt: str) -> np.ndarray:
    """uint8 [n, d] codes of an integer-format message."""
    q = buf[:, 8:]
    if fmt == "int4":
        q = np.stack([q & 0xF, q >> 4], axis=2).reshape(buf.shape[0], 2 * q.shape[1])[:, :d]
    return q


def ref_decode(buf: np.ndarray, d: int, fmt: str) -> np.ndarray:
    n = buf.shape[0]
    if fmt == "float32":
        return buf.copy().view("<f4").reshape(n, d)
    if fmt == "bfloat16":
        return (buf.copy().view("<u2").astype(np.uint32) << 16).view(np.float32).reshape(n, d)
    hdr = buf[:, :8].copy().view("<f4")
    q = ref_codes(buf, d, fmt)
    with np.errstate(invalid="ignore"):
        return q.astype(np.float32) * hdr[:, :1] + hdr[:, 1:2]


def enc(x, fmt, seed=1, epoch=2, site=3, gid=None):
    x = torch.as_tensor(x)
    if gid is None:
        gid = torch.arange(x.shape[0]) * 7 + 11
    return encode(x, fmt, seed=seed, epoch=epoch, site=site, gid=torch.as_tensor(gid))


def sample_rows(rng, n, d):
    """Rows of mixed character: gaussian, post-ReLU, far from zero, tiny, constant."""
    x = rng.standard_normal((n, d)).astype(np.float32)
    kind = np.arange(n) % 5
    x[kind == 1] = np.maximum(x[kind == 1], 0)
    x[kind == 2] = 1000 + x[kind == 2] * 1e-2
    x[kind == 3] *= 1e-7
    x[kind == 4] = x[kind == 4, :1]
    return x


# ---------------------------------------------------------------- sizes
@pytest.mark.parametrize("fmt", WIRE_FORMATS)
def test_row_bytes_is_the_formula_and_the_encoded_width(fmt):
    formula = {"float32": lambda d: 4 * d, "bfloat16": lambda d: 2 * d,
               "int8": lambda d: 8 + d, "int4": lambda d: 8 + math.ceil(d / 2)}[fmt]
    rng = np.random.default_rng(0)
    for d in list(range(0, 40)) + [63, 64, 65, 100, 101, 128, 255, 1000]:
        buf = enc(rng.standard_normal((3, d)).astype(np.float32), fmt)
        assert row_bytes(d, fmt) == formula(d) == buf.shape[1] == buf.nbytes // 3, (fmt, d)
        assert buf.dtype == torch.uint8


def test_row_bytes_rejects_bad_input():
    with pytest.raises(ValueError, match="float16"):
        row_bytes(4, "float16")
    with pytest.raises(ValueError, match="d must be"):
        row_bytes(-1, "int8")


# ---------------------------------------------------------------- lossless formats
def special_values():
    x = np.random.default_rng(1).standard_normal((6, 9)).astype(np.float32)
    x[0, :5] = [np.nan, np.inf, -np.inf, -0.0, 1e-45]
    x[1, :3] = [FLT_MAX, -FLT_MAX, np.float32(3.3e38)]
    return x


def test_float32_is_a_lossless_zero_copy_view():
    x = special_values()
    t = torch.from_numpy(x.copy())
    buf = encode(t, "float32")
    assert buf.data_ptr() == t.data_ptr()  # no copy
    np.testing.assert_array_equal(buf.numpy(), ref_encode(x, "float32"))
    y = decode(buf, 9, "float32")
    assert y.data_ptr() == buf.data_ptr()
    assert np.array_equal(y.numpy().view(np.uint32), x.view(np.uint32))  # bit for bit, NaN included
    # a row slice of the received message decodes alone
    assert np.array_equal(decode(buf[2:5], 9, "float32").numpy().view(np.uint32), x[2:5].view(np.uint32))


def test_bfloat16_is_round_to_nearest_even_like_torch():
    rng = np.random.default_rng(2)
    x = np.concatenate([special_values(), (rng.standard_normal((50, 9)) * 10.0 ** rng.integers(-30, 30, (50, 1)))
                        .astype(np.float32)])
    # exact ties: 1 + 2**-8 (even below) and 1 + 3 * 2**-8 (odd below: rounds up)
    x[10, :2] = [1 + 2.0**-8, 1 + 3 * 2.0**-8]
    t = torch.from_numpy(x)
    buf = encode(t, "bfloat16")
    want = t.to(torch.bfloat16)
    np.testing.assert_array_equal(buf.view(torch.int16).numpy(), want.view(torch.int16).numpy())
    finite = ~np.isnan(x)
    ref = ref_encode(x, "bfloat16").view("<u2")
    np.testing.assert_array_equal(buf.numpy().view("<u2")[finite], ref[finite])
    assert ref[10, 0] == 0x3F80 and ref[10, 1] == 0x3F82
    y = decode(buf, 9, "bfloat16")
    assert y.dtype == torch.float32
    np.testing.assert_array_equal(y.numpy()[finite], ref_decode(ref_encode(x, "bfloat16"), 9, "bfloat16")[finite])
    assert torch.isnan(y[0, 0]) and y[0, 1] == math.inf and y[0, 2] == -math.inf


# ---------------------------------------------------------------- integer formats: bytes
@pytest.mark.parametrize("fmt", INT_FORMATS)
@pytest.mark.parametrize("d", [1, 2, 3, 7, 16, 101])
def test_int_bytes_equal_the_numpy_reference(fmt, d):
    x = sample_rows(np.random.default_rng(d), 40, d)
    gid = np.random.default_rng(5).choice(10**12, 40, replace=False)  # ids above 2**32 too
    buf = enc(x, fmt, seed=12345, epoch=7, site=3, gid=gid)
    want = ref_encode(x, fmt, 12345, 7, 3, gid)
    np.testing.assert_array_equal(buf.numpy(), want)
    np.testing.assert_array_equal(decode(buf, d, fmt).numpy(), ref_decode(want, d, fmt))


@settings(max_examples=40, deadline=None)
@given(n=st.integers(0, 12), d=st.integers(0, 40), fmt=st.sampled_from(INT_FORMATS),
       seed=st.integers(0, 2**63 - 1), epoch=st.integers(0, 10**6), site=st.integers(0, 2**40 - 1),
       log_scale=st.integers(-30, 30), shift=st.floats(-1e6, 1e6), data=st.data())
def test_int_bytes_equal_the_reference_property(n, d, fmt, seed, epoch, site, log_scale, shift, data):
    rs = data.draw(st.integers(0, 2**32 - 1))
    x = (np.random.default_rng(rs).standard_normal((n, d)) * 10.0**log_scale + shift).astype(np.float32)
    gid = np.arange(n) * 3 + rs
    buf = enc(x, fmt, seed, epoch, site, gid)
    want = ref_encode(x, fmt, seed, epoch, site, gid)
    np.testing.assert_array_equal(buf.numpy(), want)
    y = decode(buf, d, fmt).numpy()
    np.testing.assert_array_equal(y, ref_decode(want, d, fmt))
    if n and d:  # one step per element, plus float32's own resolution of the values
        step = want[:, :8].copy().view("<f4")[:, :1].astype(np.float64)
        tol = step * (1 + 1e-5) + 4 * np.finfo(np.float32).eps * np.abs(x).max(axis=1, keepdims=True)
        assert np.all(np.abs(y.astype(np.float64) - x) <= tol)


def test_int8_and_int4_byte_layout_by_hand():
    # min 0, max L: scale exactly 1.0, offset 0.0, integer t: no rounding happens at all
    x = np.array([[0, 15, 7]], np.float32)
    b4 = enc(x, "int4").numpy()[0]
    assert list(b4) == [0x00, 0x00, 0x80, 0x3F, 0, 0, 0, 0, 0xF0, 0x07]  # 1.0f, 0.0f, (0 | 15<<4), (7 | pad 0)
    x8 = np.array([[-1, 254, 6, 0]], np.float32)  # scale 1.0, offset -1.0: codes 0, 255, 7, 1
    b8 = enc(x8, "int8").numpy()[0]
    assert list(b8) == [0x00, 0x00, 0x80, 0x3F, 0x00, 0x00, 0x80, 0xBF, 0, 255, 7, 1]


@pytest.mark.parametrize("d", [1, 3, 7, 101])
def test_int4_packs_odd_widths_per_row(d):
    x = sample_rows(np.random.default_rng(3), 9, d)
    buf = enc(x, "int4").numpy()
    assert buf.shape == (9, 8 + (d + 1) // 2)
    assert np.all(buf[:, -1] >> 4 == 0)  # padding nibble of each row is 0
    _, _, t, _ = ref_quant(x, "int4")
    codes = ref_codes(buf, d, "int4")
    assert np.all((codes == np.floor(t)) | (codes == np.floor(t) + 1))  # each code is a neighbour of t
    for i in range(9):  # each row decodes alone
        np.testing.assert_array_equal(decode(torch.from_numpy(buf[i:i + 1]), d, "int4").numpy(),
                                      ref_decode(buf[i:i + 1], d, "int4"))


# ---------------------------------------------------------------- statistics of the rounding
@pytest.mark.parametrize("fmt", INT_FORMATS)
def test_rounding_is_unbiased_over_many_keys(fmt):
    K = 2000
    x = sample_rows(np.random.default_rng(4), 4, 24)
    x[3] = np.linspace(-1, 1, 24, dtype=np.float32) ** 3  # not constant, unlike sample_rows' kind 4
    scale, _, t, _ = ref_quant(x, fmt)
    frac = (t - np.floor(t)).astype(np.float64)
    # K keys as K different node ids, in one call; then K/4 epochs and K/4 seeds, a call each
    bufs = [enc(np.tile(x, (K, 1)), fmt, gid=np.arange(4 * K) + 10**9).numpy().reshape(K, 4, -1)]
    for key in ("epoch", "seed"):
        bufs.append(np.stack([enc(x, fmt, **{key: i}).numpy() for i in range(K // 4)]))
    for b in bufs:
        k = b.shape[0]
        y = ref_decode(b.reshape(k * 4, -1), 24, fmt).reshape(k, 4, 24)
        err = (y.astype(np.float64) - x).mean(axis=0)
        se = scale[:, None].astype(np.float64) * np.sqrt(frac * (1 - frac) / k)
        tol = 5 * se + 1e-6 * np.abs(x) + 1e-5 * scale[:, None]  # float32 resolution of x and t
        assert np.all(np.abs(err) <= tol), np.max(np.abs(err) - tol)
        z = err.sum() / math.sqrt((se**2).sum())  # all elements together: a few sigma
        assert abs(z) < 4, z
        # not all-floor, not all-ceil: where the fraction is far from 0 and 1, both happen
        q = ref_codes(b.reshape(k * 4, -1), 24, fmt).reshape(k, 4, 24) > np.floor(t)
        mixed = (frac > 0.05) & (frac < 0.95)
        assert mixed.sum() > 30
        assert np.all(q.any(axis=0)[mixed]) and np.all((~q).any(axis=0)[mixed])
        np.testing.assert_allclose(q.mean(axis=0)[mixed], frac[mixed], atol=5 * 0.5 / math.sqrt(k))


def test_rounding_key_sensitivity():
    # every value halfway between two codes: the rounding is a fair coin per element
    d = 64
    x = np.zeros((1, d), np.float32)
    x[0, 1:-1] = np.arange(1, d - 1) % 14 + 0.5
    x[0, -1] = 15  # min 0, max 15: int4 scale exactly 1
    def ups(**kw):
        buf = enc(x, "int4", **kw).numpy()
        codes = ref_codes(buf, d, "int4")[0, 1:d - 1]
        return codes > np.floor(x[0, 1:-1])
    base = ups(gid=[5])
    assert 0.25 < base.mean() < 0.75  # different columns round differently
    assert np.array_equal(base, ups(gid=[5]))  # same key: same pattern
    for kw in ({"gid": [6]}, {"gid": [5 + 2**32]}, {"gid": [5], "epoch": 3}, {"gid": [5], "seed": 2},
               {"gid": [5], "site": 4}):
        other = ups(**kw)
        assert 0.25 < (other != base).mean() < 0.75, kw  # about half the coins differ


def test_same_key_gives_same_bytes_and_the_stream_is_not_a_dropout_stream():
    x = sample_rows(np.random.default_rng(6), 20, 33)
    for fmt in WIRE_FORMATS:
        assert torch.equal(enc(x, fmt), enc(x.copy(), fmt))
    from gnnpipe.models.ops import stream_keys
    assert wire.wire_keys(1, 2, 3) != stream_keys(1, 2, 3)
    with pytest.raises(ValueError, match="site"):
        wire.wire_keys(1, 2, 2**40)


@pytest.mark.parametrize("fmt", WIRE_FORMATS)
def test_bytes_do_not_depend_on_how_rows_are_split_or_ordered(fmt):
    x = sample_rows(np.random.default_rng(7), 10, 13)
    gid = np.random.default_rng(8).choice(10**6, 10, replace=False)
    whole = enc(x, fmt, gid=gid)
    parts = torch.cat([enc(x[:5], fmt, gid=gid[:5]), enc(x[5:], fmt, gid=gid[5:])])
    assert torch.equal(whole, parts)
    perm = np.random.default_rng(9).permutation(10)
    assert torch.equal(enc(x[perm], fmt, gid=gid[perm]), whole[torch.from_numpy(perm)])
    # and a received message sliced by rows decodes to the same rows
    assert torch.equal(decode(whole[3:8], 13, fmt), decode(whole, 13, fmt)[3:8])


# ---------------------------------------------------------------- edge cases
@pytest.mark.parametrize("fmt", INT_FORMATS)
def test_constant_and_zero_rows_round_trip_exactly(fmt):
    x = np.array([[0.0] * 5, [3.25] * 5, [-1e-30] * 5, [FLT_MAX] * 5], np.float32)
    buf = enc(x, fmt)
    np.testing.assert_array_equal(decode(buf, 5, fmt).numpy(), x)
    assert np.all(buf.numpy()[:, :4] == 0)  # scale 0.0
    assert np.all(buf.numpy()[:, 8:] == 0)


@pytest.mark.parametrize("fmt", INT_FORMATS)
def test_non_finite_rows_decode_as_nan_and_leave_other_rows_alone(fmt):
    x = sample_rows(np.random.default_rng(10), 6, 7)
    x[1, 2] = np.nan
    x[2, 0] = np.inf
    x[3, 6] = -np.inf
    x[4, :2] = [3e38, -3e38]  # finite, but the range is beyond float32
    buf = enc(x, fmt)
    np.testing.assert_array_equal(buf.numpy(), ref_encode(x, fmt, 1, 2, 3, np.arange(6) * 7 + 11))
    y = decode(buf, 7, fmt).numpy()
    assert np.all(np.isnan(y[1:5]))
    assert np.all(np.isnan(buf.numpy()[1:5, :8].copy().view("<f4")))
    assert np.all(buf.numpy()[1:5, 8:] == 0)
    assert np.all(np.isfinite(y[[0, 5]]))
    clean = np.delete(x, [1, 2, 3, 4], axis=0)
    gid = np.delete(np.arange(6) * 7 + 11, [1, 2, 3, 4])
    assert torch.equal(buf[[0, 5]], enc(clean, fmt, gid=gid))


@pytest.mark.parametrize("fmt", WIRE_FORMATS)
def test_empty_messages(fmt):
    for n, d in ((0, 5), (0, 0), (3, 0)):
        buf = enc(np.zeros((n, d), np.float32), fmt)
        assert tuple(buf.shape) == (n, row_bytes(d, fmt))
        assert tuple(decode(buf, d, fmt).shape) == (n, d)


@pytest.mark.parametrize("fmt", WIRE_FORMATS)
def test_non_contiguous_input_encodes_like_its_contiguous_copy(fmt):
    base = torch.from_numpy(sample_rows(np.random.default_rng(11), 12, 20))
    for view in (base.t().contiguous().t(), base[:, 3:17], base[::2]):
        assert not view.is_contiguous()
        gid = torch.arange(view.shape[0]) + 100
        assert torch.equal(encode(view, fmt, seed=1, epoch=1, site=1, gid=gid),
                           encode(view.contiguous(), fmt, seed=1, epoch=1, site=1, gid=gid))
    buf = encode(base, fmt, seed=1, epoch=1, site=1, gid=torch.arange(12))
    wide = torch.zeros(12, buf.shape[1] + 6, dtype=torch.uint8)
    wide[:, 3:-3] = buf  # a non-contiguous receive buffer decodes too
    assert torch.equal(decode(wide[:, 3:-3], 20, fmt), decode(buf, 20, fmt))


def test_low_precision_input_is_widened():
    x = torch.from_numpy(sample_rows(np.random.default_rng(12), 5, 6))
    for fmt in WIRE_FORMATS:
        for dt in (torch.bfloat16, torch.float16):
            low = x.to(dt)
            assert torch.equal(enc(low, fmt), enc(low.float(), fmt))


@pytest.mark.parametrize("fmt", WIRE_FORMATS)
def test_device_agnostic_on_meta(fmt):
    # Meta tensors have no values: any CPU tensor mixed into the computation raises.
    x = torch.empty(6, 11, device="meta")
    buf = encode(x, fmt, seed=1, epoch=1, site=1, gid=torch.empty(6, dtype=torch.int64, device="meta"))
    assert buf.device.type == "meta" and tuple(buf.shape) == (6, row_bytes(11, fmt))
    y = decode(buf, 11, fmt)
    assert y.device.type == "meta" and y.dtype == torch.float32 and tuple(y.shape) == (6, 11)


def test_bad_arguments_say_what_was_expected():
    x = torch.zeros(3, 4)
    with pytest.raises(ValueError, match="needs seed, epoch, site and gid"):
        encode(x, "int8", seed=1, epoch=1, site=1)
    with pytest.raises(ValueError, match=r"gid must be an integer tensor \[3\]"):
        encode(x, "int4", seed=1, epoch=1, site=1, gid=torch.arange(4))
    with pytest.raises(ValueError, match="2-D floating"):
        encode(torch.zeros(3, dtype=torch.int64).view(3, 1), "float32")
    with pytest.raises(ValueError, match=r"expected uint8 \[n, 12\]"):
        decode(torch.zeros(3, 13, dtype=torch.uint8), 4, "int8")
    with pytest.raises(ValueError, match="not one of"):
        encode(x, "fp8")
    assert not wire.is_lossy("float32") and all(wire.is_lossy(f) for f in WIRE_FORMATS[1:])


def test_a_fraction_equal_to_the_threshold_rounds_down():
    # u_j = k_j / 2**24 and the rule is "up iff u_j < frac": pick a node whose column-1
    # threshold is k >= 2**23, so that t = k / 2**24 (in [0.5, 1)) is exact in float32.
    for g in range(1000):
        k = int(round(ref_u(np.array([g]), 2, 1, 2, 3)[0, 1] * 2**24))
        if k >= 2**23:
            break
    x = np.array([[0, k / 2**24, 15]], np.float32)  # int4: scale 1.0, offset 0.0
    assert ref_codes(enc(x, "int4", gid=[g]).numpy(), 3, "int4")[0, 1] == 0
    x[0, 1] = np.nextafter(x[0, 1], np.float32(1))  # one ulp above the threshold: up
    assert ref_codes(enc(x, "int4", gid=[g]).numpy(), 3, "int4")[0, 1] == 1


@pytest.mark.parametrize("fmt", INT_FORMATS)
def test_blocked_encoding_matches_the_reference_across_block_edges(fmt, monkeypatch):
    # The encoder works in blocks of rows; blocks of 2 or 3 rows here (not dividing n = 23).
    x = sample_rows(np.random.default_rng(13), 23, 7)
    gid = np.arange(23) * 5 + 2**33
    for block in (7, 14, 21):
        monkeypatch.setattr(wire, "_BLOCK_VALUES", block)
        np.testing.assert_array_equal(enc(x, fmt, gid=gid).numpy(), ref_encode(x, fmt, 1, 2, 3, gid))


def test_rows_that_require_grad_are_encoded_detached():
    x = torch.randn(4, 6, requires_grad=True)
    for fmt in WIRE_FORMATS:
        buf = enc(x, fmt)
        assert not buf.requires_grad
        assert torch.equal(buf, enc(x.detach(), fmt))
