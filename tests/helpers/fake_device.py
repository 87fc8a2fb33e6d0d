"""A stand-in accelerator for CPU-only machines: tensors that say they live on another
device, compute on the CPU underneath, and fail as a GPU would when mixed with CPU tensors.

``with FakeDevice() as fd:`` every tensor made for ``fd.device`` (``device=fd.device`` in a
factory, ``.to(fd.device)``, a module's ``.to``) is a :class:`OnDevice` wrapper around a CPU
tensor; every op on wrappers runs on the CPU tensors inside and returns wrappers. Inside the
context:

* an op that mixes a wrapper with a plain CPU tensor (other than a 0-d scalar) raises
  :class:`DeviceMismatch`, as CUDA's "Expected all tensors to be on the same device" would;
  ``copy_`` between them is a transfer, as on a GPU;
* every read of a device value on the host (``float()``, ``int()``, ``.item()``,
  ``.tolist()``, ``.numpy()`` refused like CUDA's, ``.cpu()``/``.to("cpu")``) is counted in
  :attr:`FakeDevice.host_reads`, with the gnnpipe frame that asked (:attr:`FakeDevice.read_sites`);
* every plain CPU tensor of more than one element made by gnnpipe code outside
  ``gnnpipe/comm`` (the communicators stage a GPU's messages through host memory by design)
  is recorded in :attr:`FakeDevice.cpu_made`, with the file and line that made it (the
  deliberate uploads of host-chosen index data through :func:`gnnpipe.device.upload` are
  counted in :attr:`FakeDevice.uploads` instead).

The "device" is torch's ``meta`` device: it has no kernels (so nothing can run there by
accident: the wrappers' data are CPU tensors) and, unlike a CUDA device on a CPU-only build,
autograd accepts it. Sparse CSR tensors cannot be wrapped (their layout queries bypass
Python); a CSR matrix built from device tensors is a plain CSR tensor registered as on the
device, and the sparse products that read it are checked by hand.

Why this exists: ``--device cuda`` must put every tensor of a run on the GPU, and CI has no
GPU. This catches the same mistakes a GPU would (a buffer made on the CPU, a CPU index into
device rows, a host read per chunk) on a CPU.
"""

from __future__ import annotations

import os
import sys
import traceback
import weakref
from collections import Counter

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten, tree_map

DEVICE = torch.device("meta")
CPU = torch.device("cpu")
aten = torch.ops.aten

_GNNPIPE = os.path.dirname(os.path.abspath(__import__("gnnpipe").__file__)) + os.sep
_COMM = _GNNPIPE + "comm" + os.sep

# CSR tensors built from device components (id -> tensor; weak, so ids are not reused)
_CSR_ON_DEVICE: "weakref.WeakValueDictionary[int, torch.Tensor]" = weakref.WeakValueDictionary()
_ACTIVE: list["FakeDevice"] = []
# > 0 while the stand-in itself computes on the CPU tensors inside (not recorded)
_QUIET = [0]


class _quiet:
    def __enter__(self):
        _QUIET[0] += 1

    def __exit__(self, *exc):
        _QUIET[0] -= 1


class DeviceMismatch(RuntimeError):
    """An op mixed tensors of the device and the CPU (a GPU would refuse it too)."""


def _caller() -> str:
    """``file:line`` of the innermost gnnpipe frame on the stack ('' if none)."""
    f = sys._getframe(2)
    while f is not None:
        fn = f.f_code.co_filename
        if fn.startswith(_GNNPIPE):
            return f"{os.path.relpath(fn, os.path.dirname(_GNNPIPE.rstrip(os.sep)))}:{f.f_lineno}"
        f = f.f_back
    return ""


def _on_device_csr(t) -> bool:
    return (isinstance(t, torch.Tensor) and not isinstance(t, OnDevice) and t.layout == torch.sparse_csr
            and _CSR_ON_DEVICE.get(id(t)) is t)


def on_device(t) -> bool:
    """Whether ``t`` lives on the stand-in device (a wrapper, or a CSR built from wrappers)."""
    return _on_device(t)


def _on_device(t) -> bool:
    return isinstance(t, OnDevice) or _on_device_csr(t)


def _unwrap(x):
    return x.inner if isinstance(x, OnDevice) else x


def _wrap(x):
    if isinstance(x, torch.Tensor) and not isinstance(x, OnDevice):
        if x.layout != torch.strided:
            _CSR_ON_DEVICE[id(x)] = x
            return x
        return OnDevice(x)
    return x


def _host_read(what: str) -> None:
    """Count a read of device values on the host, except the communicators' staging copies
    (a message's transfer, not a wait for a value)."""
    site = _caller()
    if site.startswith("gnnpipe/comm/"):
        return
    for fd in _ACTIVE:
        fd.host_reads += 1
        fd.read_sites[f"{what} at {site or 'outside gnnpipe'}"] += 1


class OnDevice(torch.Tensor):
    """A tensor on :data:`DEVICE` whose values are the CPU tensor :attr:`inner`."""

    @staticmethod
    def __new__(cls, inner: torch.Tensor):
        kw = dict(dtype=inner.dtype, device=DEVICE, layout=inner.layout, requires_grad=inner.requires_grad,
                  strides=inner.stride(), storage_offset=inner.storage_offset())
        r = torch.Tensor._make_wrapper_subclass(cls, inner.shape, **kw)
        r.inner = inner
        return r

    def __repr__(self, *, tensor_contents=None) -> str:
        return f"OnDevice({self.inner!r})"

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is aten._to_copy.default:
            dev = kwargs.get("device")
            rest = {k: v for k, v in kwargs.items() if k != "device"}
            out = func(_unwrap(args[0]), **rest)
            if dev is not None and torch.device(dev).type == "cpu":
                _host_read("copy to the host")
                return out
            return OnDevice(out)
        if func is aten._local_scalar_dense.default:
            _host_read("scalar read")
            return func(_unwrap(args[0]))
        flat, _ = tree_flatten((args, kwargs))
        plain = [x for x in flat if isinstance(x, torch.Tensor) and not _on_device(x) and x.dim() > 0]
        # A sparse product with a device CSR decomposes in C++ into ops on scratch tensors
        # that C++ makes beside the CSR's CPU storage (in backward, where the function mode
        # does not reach): those are the device's own.
        sparse_op = any(_on_device_csr(x) for x in flat)
        if plain and func is not aten.copy_.default and not sparse_op:
            raise DeviceMismatch(
                f"{func}: expected all tensors on {DEVICE}, found CPU tensors of shapes "
                f"{[tuple(p.shape) for p in plain]} (at {_caller() or 'outside gnnpipe'})")
        out = func(*tree_map(_unwrap, args), **tree_map(_unwrap, kwargs))
        if func is aten.copy_.default:
            return args[0]
        return tree_map(_wrap, out)


_SPARSE_MM, _SPARSE_CSR = torch.sparse.mm, torch.sparse_csr_tensor


def _sparse_mm(a, b):
    """``torch.sparse.mm`` on the stand-in device: both operands there, or both on the CPU."""
    on = {_on_device(a), _on_device(b)}
    if len(on) > 1:
        raise DeviceMismatch(f"sparse.mm: an operand on {DEVICE} and one on the CPU (at {_caller()})")
    with torch._C.DisableTorchFunction(), _quiet():
        out = _SPARSE_MM(_unwrap(a), _unwrap(b))
    return _wrap(out) if on == {True} else out


def _sparse_csr_tensor(crow, col, values, *args, **kwargs):
    parts = [crow, col, values]
    on = [_on_device(t) for t in parts]
    if any(on) and not all(on):
        raise DeviceMismatch(f"sparse_csr_tensor: components on {DEVICE} and the CPU (at {_caller()})")
    with torch._C.DisableTorchFunction(), _quiet():
        out = _SPARSE_CSR(*[_unwrap(t) for t in parts], *args, **kwargs)
    if all(on):
        _CSR_ON_DEVICE[id(out)] = out
    return out


def _parse_to(args, kwargs):
    if args and isinstance(args[0], torch.Tensor):
        return args[0].device, args[0].dtype, kwargs.get("non_blocking", False), None
    return torch._C._nn._parse_to(*args, **kwargs)


class FakeDevice(TorchFunctionMode):
    """The context in which :data:`DEVICE` computes (see the module docstring)."""

    device = DEVICE

    def __init__(self) -> None:
        super().__init__()
        self.host_reads = 0
        self.read_sites: Counter = Counter()
        self.cpu_made: Counter = Counter()
        self.uploads = 0
        self._swap = None

    def __enter__(self):
        self._swap = torch.__future__.get_swap_module_params_on_conversion()
        torch.__future__.set_swap_module_params_on_conversion(True)  # modules' .to keeps wrappers
        # backward on this thread: a device's backward otherwise runs on a worker thread,
        # which this mode does not reach
        self._mt = torch.autograd.set_multithreading_enabled(False)
        self._mt.__enter__()
        # Custom autograd functions' backward runs without function modes: the sparse
        # constructor and product that backward passes call are replaced while active.
        self._saved = (torch.sparse.mm, torch.sparse_csr_tensor)
        torch.sparse.mm, torch.sparse_csr_tensor = _sparse_mm, _sparse_csr_tensor
        _ACTIVE.append(self)
        self._record = _RecordCpu(self)
        self._record.__enter__()
        return super().__enter__()

    def __exit__(self, *exc):
        out = super().__exit__(*exc)
        self._record.__exit__(*exc)
        _ACTIVE.remove(self)
        self._mt.__exit__(*exc)
        torch.sparse.mm, torch.sparse_csr_tensor = self._saved
        torch.__future__.set_swap_module_params_on_conversion(self._swap)
        return out

    def reset(self) -> None:
        self.host_reads = 0
        self.read_sites.clear()
        self.cpu_made.clear()
        self.uploads = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        name = getattr(func, "__name__", "")
        if func is torch.Tensor.to:
            x = args[0]
            dev, dtype, non_blocking, memory_format = _parse_to(args[1:], kwargs)
            kw = {} if memory_format is None else {"memory_format": memory_format}
            if dtype is not None:
                kw["dtype"] = dtype
            if dev is not None and dev.type == DEVICE.type:
                if _on_device(x):
                    return func(x, **kw) if kw else x
                with _quiet():
                    y = x.to(**kw) if kw else x
                if y.layout != torch.strided:
                    y = y.clone()
                    _CSR_ON_DEVICE[id(y)] = y
                    return y
                return OnDevice(y)
            if dev is not None and dev.type == "cpu" and _on_device(x):
                _host_read("copy to the host")
                y = _unwrap(x)
                return y.to(**kw) if kw else y.clone()
            return func(*args, **kwargs)
        if func is torch.Tensor.cpu and _on_device(args[0]):
            _host_read("copy to the host")
            return _unwrap(args[0]).clone()
        if func in (torch.Tensor.tolist, torch.Tensor.item, torch.Tensor.__float__, torch.Tensor.__int__,
                    torch.Tensor.__bool__, torch.Tensor.__index__) and isinstance(args[0], OnDevice):
            _host_read(name or "read")
            return func(args[0].inner, *args[1:], **kwargs)
        if func is torch.Tensor.numpy and _on_device(args[0]):
            raise TypeError(f"can't convert {DEVICE} device type tensor to numpy (at {_caller()}); "
                            "copy it to the host first")
        if func is torch.Tensor.data_ptr and isinstance(args[0], OnDevice):
            return args[0].inner.data_ptr()
        dev = kwargs.get("device")
        if dev is not None and torch.device(dev).type == DEVICE.type:
            kwargs["device"] = CPU
            with torch._C.DisableTorchFunctionSubclass(), _quiet():
                out = func(*tree_map(_unwrap, args), **tree_map(_unwrap, kwargs))
            return tree_map(_wrap, out)
        if func is torch.Tensor.device.__get__ and _on_device_csr(args[0]):
            return DEVICE
        if func in (torch.Tensor.crow_indices, torch.Tensor.col_indices, torch.Tensor.values) and _on_device_csr(args[0]):
            return OnDevice(func(*args, **kwargs))
        if name in ("mm", "_sparse_mm", "matmul", "__matmul__", "addmm") and len(args) >= 2 and any(
                isinstance(a, torch.Tensor) and a.layout == torch.sparse_csr for a in args[:2]):
            on = {_on_device(a) for a in args[:2] if isinstance(a, torch.Tensor)}
            if len(on) > 1:
                raise DeviceMismatch(f"{name}: a sparse product of {DEVICE} and CPU tensors (at {_caller()})")
            with _quiet():
                out = func(*tree_map(_unwrap, args), **tree_map(_unwrap, kwargs))
            return tree_map(_wrap, out) if on == {True} else out
        return func(*args, **kwargs)


class _RecordCpu(torch.utils._python_dispatch.TorchDispatchMode):
    """Records plain CPU tensors (> 1 element) that gnnpipe code outside the communicators
    makes while a :class:`FakeDevice` is active."""

    def __init__(self, fd: FakeDevice) -> None:
        super().__init__()
        self.fd = fd

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        dev = kwargs.get("device")
        if dev is not None and torch.device(dev).type == DEVICE.type:
            # a factory called from C++ (autograd's zeros for a missing gradient, ...)
            with _quiet():
                out = func(*args, **{**kwargs, "device": CPU})
            return tree_map(_wrap, out)
        out = func(*args, **kwargs)
        if self.fd.recording and not _QUIET[0]:
            flat, _ = tree_flatten(out)
            for t in flat:
                if (isinstance(t, torch.Tensor) and not isinstance(t, OnDevice) and t.device.type == "cpu"
                        and t.numel() > 1 and not _on_device_csr(t)):
                    site = _caller()
                    # (gnnpipe.device.upload: the deliberate host-to-device copy of index
                    # data chosen on the host; its callers are recorded in ``uploads``)
                    if site.startswith("gnnpipe/device.py"):
                        self.fd.uploads += 1
                    elif site and not site.startswith("gnnpipe/comm/"):
                        self.fd.cpu_made[f"{func} at {site}"] += 1
        return out


FakeDevice.recording = False


def cpu_tensors(obj, path: str = "executor", seen=None, out=None, depth: int = 0) -> list[str]:
    """Paths of plain CPU tensors (> 1 element) reachable from ``obj`` through gnnpipe
    objects' attributes, containers, modules and blocks (communicators are not entered)."""
    seen = set() if seen is None else seen
    out = [] if out is None else out
    if id(obj) in seen or depth > 12:
        return out
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        if not _on_device(obj) and obj.device.type == "cpu" and obj.numel() > 1:
            out.append(f"{path} {tuple(obj.shape)} {obj.dtype}")
        return out
    if isinstance(obj, torch.nn.Module):
        for n, t in list(obj.named_parameters()) + list(obj.named_buffers()):
            cpu_tensors(t, f"{path}.{n}", seen, out, depth + 1)
        items = vars(obj).items()
    elif isinstance(obj, dict):
        items = ((f"[{k!r}]", v) for k, v in obj.items())
    elif isinstance(obj, (list, tuple)):
        items = ((f"[{i}]", v) for i, v in enumerate(obj))
    elif type(obj).__module__.startswith("gnnpipe.") and not type(obj).__module__.startswith("gnnpipe.comm"):
        items = vars(obj).items() if hasattr(obj, "__dict__") else ()
    else:
        return out
    for k, v in items:
        if isinstance(k, str) and k in ("comm", "cross", "world", "_parameters", "_buffers", "_modules"):
            continue
        sub = f"{path}{k}" if isinstance(k, str) and k.startswith("[") else f"{path}.{k}"
        cpu_tensors(v, sub, seen, out, depth + 1)
    return out


def format_stack() -> str:  # pragma: no cover - a debugging aid
    return "".join(traceback.format_stack(limit=12))
