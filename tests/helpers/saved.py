"""What autograd keeps from forward to backward, for the memory tests.

:class:`Saved` collects the unique storages autograd saves inside its context
(``saved_tensors_hooks``), leaving out those of ``exclude`` — parameters and a block's own
tensors, which the memory model counts under parameters and structure, not activations.
:func:`tensors` lists the dense tensors inside nested dicts, tuples and lists (e.g.
``vars(block)``, to exclude a block's cached arrays).
"""

from __future__ import annotations

import torch


class Saved:
    """Unique storages autograd saves inside the context (bytes, by dtype), minus ``exclude``'s."""

    def __init__(self, exclude=()) -> None:
        self.exclude = {t.untyped_storage().data_ptr() for t in exclude}
        self.by_ptr: dict[int, tuple[int, torch.dtype]] = {}

    def __enter__(self):
        def pack(t):
            if t.layout == torch.strided:
                st = t.untyped_storage()
                if st.data_ptr() not in self.exclude:
                    self.by_ptr[st.data_ptr()] = (st.nbytes(), t.dtype)
            return t

        self._ctx = torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t)
        self._ctx.__enter__()
        return self

    def __exit__(self, *exc):
        self._ctx.__exit__(*exc)

    def bytes(self, dtype=None) -> int:
        """Bytes saved (of ``dtype`` only, when given)."""
        return sum(n for n, dt in self.by_ptr.values() if dtype is None or dt == dtype)

    def by_dtype(self) -> dict:
        out: dict = {}
        for n, dt in self.by_ptr.values():
            out[dt] = out.get(dt, 0) + n
        return out


def tensors(obj):
    """Dense tensors inside ``obj`` (a tensor, or nested dicts / tuples / lists of them)."""
    if isinstance(obj, torch.Tensor):
        if obj.layout == torch.strided:
            yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from tensors(v)
    elif isinstance(obj, (tuple, list)):
        for v in obj:
            yield from tensors(v)
