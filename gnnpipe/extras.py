"""Optional dependencies: whether one is installed, and the one line that says how to get it.

DGL is an extra (``pip install 'gnnpipe[dgl]'``): only ``--backend dgl`` and
``Graph.from_dgl``/``to_dgl`` need it, and its 1.1 wheels exist for Python 3.11 only. Asking
for it without it installed must fail before any rank starts training, in one line.
"""

from __future__ import annotations

import importlib.util

from gnnpipe._base import GnnpipeError

DGL_INSTALL = "pip install 'gnnpipe[dgl]' (DGL 1.1.x; its wheels are for Python 3.11)"


def has_dgl() -> bool:
    """Whether ``import dgl`` can find the package (does not import it: DGL is slow to import)."""
    try:
        return importlib.util.find_spec("dgl") is not None
    except (ImportError, ValueError):  # a broken install, or a finder that refuses it
        return False


def require_dgl(what: str) -> None:
    """Raise :class:`GnnpipeError` naming ``what`` asked for DGL, when DGL is not installed."""
    if not has_dgl():
        raise GnnpipeError(f"{what} needs DGL, an optional extra that is not installed: {DGL_INSTALL}; "
                           "or use the PyG backend (--backend pyg, the default)")
