"""A one-chunk epoch's carry, sent ahead of the rows it travels with.

In a one-chunk epoch (every epoch of ``--exact``, the exact epochs of ``--exact-every``) the
stages cannot overlap: stage ``s + 1`` starts when stage ``s``'s whole output has arrived,
so every byte that crosses a stage boundary lies on the epoch's critical path, once forward
and once backward. A carry tensor (GCNII's initial residual ``h0``) is known long before the
stage's output: the stage that writes it has it after its writing unit (GCNII's input unit,
the first of stage 0), and a stage that only hands it on has it when it arrives. So in these
epochs each carry key travels in a message of its own, sent as soon as it is final, while
the stage still computes; the chunk message holds the rows ``h`` alone. On a slow link this
takes the carry's bytes off the critical path: for GCNII, half of every boundary's bytes.

Forward, at stage ``s``:

- a key written here (:meth:`StageUnits.carry_ready_after`) is encoded and sent to ``s + 1``
  from the stage's forward, right after its last writer runs;
- a key handed on unchanged (:attr:`StageUnits.carry_passed`) is sent on as it arrived, the
  received bytes themselves, before the stage waits for its rows: with a lossy wire it is
  rounded once, where it was written, not again at every boundary.

Backward, in reverse: a stage sends the gradient of its input rows first, then each carry
key's. Only a key written here needs the later stages' gradient inside this stage's
backward (it flows into the writer); a key handed on does not: the stage's backward gives
its own units' part, and the later stages' part, which arrives meanwhile, is added after
(``own + later``, one sum per key and stage, where one packed message left the order of
that sum to autograd: the same numbers up to rounding).

Bytes: float32 moves the same bytes as one ``[h | carry]`` message. A lossy wire encodes
each key as its own wire row (one header more per row and key; rounding sites
``KIND_CARRY + i`` of :mod:`gnnpipe.wire`); :func:`gnnpipe.partition.volume.pipeline_bytes`
with ``carry_apart`` counts them.
"""

from __future__ import annotations

import time

import torch

from gnnpipe.wire import KIND_CARRY, MAX_CARRY_KEYS, Wire, message_site

# Tags apart from the chunk messages' (2k, 2k + 1), evaluation's and the shared input's:
# key i travels forward at _TAG + 2i, its gradient back at _TAG + 2i + 1.
_TAG = 2**26


class CarryAhead:
    """One stage's carry messages in one one-chunk epoch (see the module docstring).

    Args:
        comm: the way's communicator (rank = stage).
        stage: the :class:`PipelineStage` running the epoch (one chunk).
        carry_dim: the width of each carry tensor.
        wire: the training wire format.
        epoch: the epoch (a lossy wire's rounding keys).
    """

    def __init__(self, comm, stage, carry_dim: int, wire: Wire, epoch: int) -> None:
        self.comm, self.wire, self.epoch, self.d = comm, wire, epoch, carry_dim
        self.s = comm.rank
        self.keys_in, self.keys_out = stage.block.carry_in, stage.carry_out_keys
        self.passed = stage.block.carry_passed
        if max(len(self.keys_in), len(self.keys_out)) > MAX_CARRY_KEYS:
            raise ValueError(f"stage {self.s}: more than {MAX_CARRY_KEYS} carry keys cross a stage boundary")
        chunk = stage.chunks[0]
        self.n, self.gid, self.device = chunk.size, chunk.block.dst_gid, stage.device
        self.unit_in = stage.first_unit  # the boundary before this stage is named by its first unit
        self.unit_out = stage.first_unit + len(stage.units)
        self.sends: list = []
        self.wait_s = 0.0  # seconds spent waiting for arriving keys (the runtime books the rest as de/encoding)
        self._fwd: dict = {}
        self._bwd: dict = {}

    @staticmethod
    def wanted(stage, stages: int) -> bool:
        """Whether an epoch of ``stage`` sends its carry ahead: one chunk, several stages, and
        a carry that crosses a boundary of this stage."""
        return len(stage.chunks) == 1 and stages > 1 and bool(stage.block.carry_in or stage.carry_out_keys)

    # ------------------------------------------------------------------ forward
    def post_forward(self) -> None:
        """Post the receives of every key arriving from the previous stage."""
        for i, key in enumerate(self.keys_in):
            buf = self._buffer()
            self._fwd[key] = (buf, self.comm.irecv(buf, self.s - 1, tag=_TAG + 2 * i, category="pipe_act"))

    def take_forward(self) -> dict:
        """Wait for the arriving keys, pass on those this stage does not write (the bytes as
        received), and return the chunk's carry rows."""
        carry = {}
        for key in self.keys_in:
            buf, work = self._fwd.pop(key)
            self._wait(work)
            if key in self.passed:
                i = self.keys_out.index(key)
                self.sends.append(self.comm.isend(buf, self.s + 1, tag=_TAG + 2 * i, category="pipe_act"))
            carry[key] = self._decode(buf)
        return carry

    def send_ready(self, key: str, rows: torch.Tensor) -> None:
        """A key written here is final: encode it and send it to the next stage now (the
        stage's forward calls this, ``PipelineStage.forward_chunk``'s ``on_carry``)."""
        i = self.keys_out.index(key)
        msg = self._encode(rows, i, self.unit_out, backward=False)
        self.sends.append(self.comm.isend(msg, self.s + 1, tag=_TAG + 2 * i, category="pipe_act"))

    # ------------------------------------------------------------------ backward
    def post_backward(self) -> None:
        """Post the receives of every key's gradient coming back from the next stage."""
        for i, key in enumerate(self.keys_out):
            buf = self._buffer()
            self._bwd[key] = (buf, self.comm.irecv(buf, self.s + 1, tag=_TAG + 2 * i + 1, category="pipe_grad"))

    def grads_for_backward(self) -> dict:
        """The later stages' gradients of the keys written here (they flow into the writer,
        so this stage's backward waits for them); the handed-on keys' wait until
        :meth:`send_grads`."""
        out = {}
        for key in self.keys_out:
            if key not in self.passed:
                buf, work = self._bwd.pop(key)
                self._wait(work)
                out[key] = self._decode(buf)
        return out

    def send_grads(self, own: dict) -> None:
        """Send each arriving key's gradient to the previous stage: this stage's ``own``
        (its backward's), plus the later stages' for a key handed on."""
        for i, key in enumerate(self.keys_in):
            g = own[key]
            if key in self.passed:
                buf, work = self._bwd.pop(key)
                self._wait(work)
                g = g + self._decode(buf)
            msg = self._encode(g, i, self.unit_in, backward=True)
            self.sends.append(self.comm.isend(msg, self.s - 1, tag=_TAG + 2 * i + 1, category="pipe_grad"))

    def _wait(self, work) -> None:
        t0 = time.perf_counter()
        work.wait()
        self.wait_s += time.perf_counter() - t0

    # ------------------------------------------------------------------ the wire
    def _buffer(self) -> torch.Tensor:
        if not self.wire.lossy:
            return torch.empty(self.n, self.d, device=self.device)
        return torch.empty((self.n, self.wire.row_bytes(self.d)), dtype=torch.uint8, device=self.device)

    def _encode(self, rows: torch.Tensor, i: int, unit: int, backward: bool) -> torch.Tensor:
        rows = rows.detach().contiguous()
        if not self.wire.lossy:
            return rows
        return self.wire.encode(rows, epoch=self.epoch, site=message_site(KIND_CARRY + i, unit, backward),
                                gid=self.gid)

    def _decode(self, buf: torch.Tensor) -> torch.Tensor:
        return self.wire.decode(buf, self.d) if self.wire.lossy else buf
