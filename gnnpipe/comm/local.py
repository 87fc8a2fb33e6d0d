"""World size 1: every operation local, so executors run unchanged in one process.
"""

from __future__ import annotations

import torch

from gnnpipe.comm.base import Communicator, CommStats

class SingleProcessCommunicator(Communicator):
    """World size 1: collectives are local, sends to self queue up for receives from self.

    Counts calls and time but no bytes: nothing leaves the process.
    """

    kind = "single"

    def __init__(self, timeout_s: float = 60.0, device: str | torch.device = "cpu",
                 stats: CommStats | None = None) -> None:
        super().__init__(0, 1, [0], stats or CommStats(), timeout_s, torch.device(device))

    def _isend(self, t, dst, tag, category, what):
        return self._local_isend(t, tag, category, what)

    def _irecv(self, t, src, tag, category, what):
        return self._local_irecv(t, tag, category, what)

    def _all_to_all(self, send, recv, category):
        pass  # world size 1: the base class already made the local copy

    def _all_reduce(self, t, op, category):
        pass

    def _broadcast(self, t, src, category):
        pass

    def _barrier(self, category):
        pass

    def _split_groups(self, groups, mine):
        if mine is None:
            return None
        return SingleProcessCommunicator(self.timeout_s, self.device, self.stats)

    def _close(self):
        pass
