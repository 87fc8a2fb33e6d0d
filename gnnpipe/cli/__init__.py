"""Command-line entry points (floor 5). Shared error handling for every CLI.

User errors (:class:`gnnpipe.GnnpipeError`, missing files) print one line on stderr and
exit with status 2; ``--debug`` (or ``GNNPIPE_DEBUG=1``) keeps the traceback. Ctrl-C exits
130 without a traceback.
"""

from __future__ import annotations

import errno
import logging
import os
import signal
import sys
import threading
from typing import Callable, Sequence

from gnnpipe._base import GnnpipeError

#: errno values that are the machine's state, not a bug: a full disk or quota, a read-only
#: filesystem, no permission (one line from :func:`run_cli`, not a traceback).
_MACHINE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM})
from gnnpipe.quiet import silence_for_process
from gnnpipe.config import ArgumentParser  # noqa: F401  (every CLI's parser; defined low so config can use it)


def quiet_known_warnings() -> None:
    """Silence torch's once-per-process notices that every rank would print
    (:mod:`gnnpipe.quiet`). Process-wide state, so only command-line entry points call this:
    ``import gnnpipe`` changes no global state."""
    silence_for_process()


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread so that ``finally`` blocks and context managers run
    (an interrupted ``prepare`` or ``partition`` removes its temporary directory) instead of
    the process vanishing with them undone."""


def _on_sigterm(signum, frame) -> None:
    raise Terminated()


def run_cli(main: Callable[[Sequence[str] | None], int | None], argv: Sequence[str] | None = None, prog: str = "gnnpipe") -> int:
    """Run ``main(argv)``, turning user errors into one-line messages and exit codes."""
    quiet_known_warnings()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _on_sigterm)
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args or os.environ.get("GNNPIPE_DEBUG") == "1"
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    try:
        rc = main(args)
        return int(rc or 0)
    except GnnpipeError as e:
        if debug:
            raise
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    except UnicodeDecodeError as e:
        # A binary file where text was expected, read deep in a loader: still one line.
        if debug:
            raise
        print(f"{prog}: error: an input file is not UTF-8 text ({e.reason} at byte {e.start}); "
              "--debug shows which", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        if debug:
            raise
        if isinstance(e, Terminated):
            print(f"{prog}: terminated (SIGTERM); nothing partial was left", file=sys.stderr)
            return 128 + signal.SIGTERM
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # Output piped into `head` and the reader left: not an error worth a traceback.
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 0
    except OSError as e:
        # The machine's fault, not a bug of ours: a full disk, a quota, a read-only or
        # forbidden place met by a write that had no one-line message of its own.
        if debug or e.errno not in _MACHINE_ERRNOS:
            raise
        print(f"{prog}: error: {e.filename or 'writing a file'}: {e.strerror or e}", file=sys.stderr)
        return 2
