"""Floor 0: the names every module needs (``GnnpipeError``, ``__version__``), importing nothing.

``gnnpipe/__init__.py`` re-exports both for users. Every module of the package imports them
from here, never from the package root: the root's lazy top-level exports (``gnnpipe.Graph``
and the public API) reach most modules, so importing the root back would be a cycle.
"""

__version__ = "0.1.0"


class GnnpipeError(Exception):
    """An error caused by the user's input (file, flag, field), not by a bug.

    CLIs print these as one line and exit non-zero; anything else is a bug and keeps its
    traceback.
    """
