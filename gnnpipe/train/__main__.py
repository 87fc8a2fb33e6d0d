"""``python -m gnnpipe.train`` (torchrun's ``-m``): the ``gnnpipe-train`` command."""

from gnnpipe.cli.train import entry

entry()
