"""Floor 0: the names every module needs (``GnnpipeError``, ``__version__``), importing nothing.

``gnnpipe/__init__.py`` re-exports both. Modules reachable from a lazy top-level export
(``gnnpipe.Graph``) import them from here, so that export is no import cycle with the
package root; everything else may keep ``from gnnpipe import GnnpipeError``.
"""

__version__ = "0.1.0"


class GnnpipeError(Exception):
    """An error caused by the user's input (file, flag, field), not by a bug.

    CLIs print these as one line and exit non-zero; anything else is a bug and keeps its
    traceback.
    """
