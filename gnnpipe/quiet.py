"""torch's and DGL's notices that mean nothing to a gnnpipe user, silenced where gnnpipe works.

torch warns once per process that sparse CSR is "beta" and that invariant checks are off
(gnnpipe's own tests exercise its CSR path, and it checks invariants where input enters);
``torch.jit.script`` is deprecated inside PyG's layers, not in the user's code. DGL prints
its backend choice on import unless ``DGLBACKEND`` is set.

Two ways to use the list: command-line entry points silence it for the whole process
(:func:`silence_for_process`); library calls (``gnnpipe.fit``, ``Graph.to_pyg``) silence it
only while they run (:func:`known_warnings_silenced`), so ``import gnnpipe`` and the user's
own code keep every warning.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from typing import Iterator

#: Message patterns (regular expressions matched at the start of the warning's text).
KNOWN = (
    "Sparse CSR tensor support is in beta state",
    "Sparse invariant checks are implicitly disabled",
    r"`torch\.jit\.script` is deprecated",
)


def _ignore_known() -> None:
    for pattern in KNOWN:
        warnings.filterwarnings("ignore", message=pattern)


def silence_for_process() -> None:
    """For command-line entry points: ignore the known notices for the rest of the process."""
    _ignore_known()
    os.environ.setdefault("DGLBACKEND", "pytorch")


@contextlib.contextmanager
def known_warnings_silenced() -> Iterator[None]:
    """For library calls: ignore the known notices inside the ``with`` block only."""
    os.environ.setdefault("DGLBACKEND", "pytorch")  # read by dgl on import; pytorch is the only one gnnpipe uses
    with warnings.catch_warnings():
        _ignore_known()
        yield
