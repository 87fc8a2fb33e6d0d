"""A one-chunk epoch sends its carry ahead of the rows (``gnnpipe/parallel/pipeline/carry.py``).

* which carry keys a stage writes and which it hands on (``StageUnits``);
* one stage's messages, driven with a recording communicator: a handed-on key goes on, the
  received bytes themselves, before the stage has its rows; its gradient is the stage's own
  plus the later stages', and the stage's backward does not wait for it; a key written here
  goes out from the forward and its gradient comes in before the backward;
* real ranks: 4 stages (two of them handing ``h0`` on) with exact epochs equal the oracle,
  and an exact epoch's bytes are the formula's with ``h0`` apart (int8: one header more).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

TESTS = Path(__file__).resolve().parent

from helpers.oracle import model_config  # noqa: E402
from helpers.rankfns import _cfg  # noqa: E402

from gnnpipe.data.load import load_graph_for  # noqa: E402
from gnnpipe.models import build_model  # noqa: E402
from gnnpipe.parallel.pipeline.carry import _TAG, CarryAhead  # noqa: E402
from gnnpipe.parallel.pipeline.stage import StageUnits  # noqa: E402
from gnnpipe.partition.volume import pipeline_bytes  # noqa: E402
from gnnpipe.spawn import run_ranks  # noqa: E402
from gnnpipe.wire import FLOAT32, KIND_CARRY, Wire, message_site  # noqa: E402

ENV = {"PYTHONPATH": str(TESTS)}
N, D = 7, 5


def _units(model: str = "gcnii", layers: int = 4):
    cfg = _cfg(model=model, layers=layers)
    return build_model(model_config(cfg, load_graph_for(cfg)), seed=0).units


def test_a_stage_knows_which_carry_keys_it_writes_and_which_it_hands_on():
    units = _units()  # input (writes h0), 4 GCNII layers, output
    first, middle, last = StageUnits.of(units, 0, 2), StageUnits.of(units, 2, 4), StageUnits.of(units, 4, 6)
    assert first.carry_ready_after() == {0: ("h0",)} and first.carry_passed == ()
    assert middle.carry_in == middle.carry_out == ("h0",)
    assert middle.carry_ready_after() == {} and middle.carry_passed == ("h0",)
    assert last.carry_out == () and last.carry_passed == ()
    # a model without carry has nothing to send ahead
    assert StageUnits.of(_units("gcn"), 1, 3).carry_passed == ()


class _Work:
    def __init__(self, log, what):
        self.log, self.what = log, what

    def wait(self):
        self.log.append(("wait",) + self.what)


class _Comm:
    """Records every call; a receive is filled from ``inbox[(src, tag)]``."""

    def __init__(self, rank: int, inbox: dict):
        self.rank, self.inbox, self.log = rank, inbox, []

    def isend(self, t, dst, tag, category):
        self.log.append(("isend", dst, tag, t))
        return _Work(self.log, ("send", dst, tag))

    def irecv(self, buf, src, tag, category):
        buf.copy_(self.inbox[(src, tag)])
        self.log.append(("irecv", src, tag, buf))
        return _Work(self.log, ("recv", src, tag))


def _stage(block: StageUnits):
    chunk = SimpleNamespace(size=N, block=SimpleNamespace(dst_gid=torch.arange(N)))
    return SimpleNamespace(block=block, carry_out_keys=block.carry_out, chunks=[chunk], device=torch.device("cpu"),
                           first_unit=block.first, units=list(block.units))


def test_a_handed_on_key_goes_on_as_received_and_its_gradient_adds_the_later_stages():
    units = _units()
    g = torch.Generator().manual_seed(0)
    for wire in (FLOAT32, Wire("int8", seed=3)):
        h0, later, own = (torch.randn(N, D, generator=g) for _ in range(3))
        site_in = message_site(KIND_CARRY, 2, False)
        sent_h0 = h0 if not wire.lossy else wire.encode(h0, epoch=1, site=site_in, gid=torch.arange(N))
        sent_later = later if not wire.lossy else wire.encode(later, epoch=1, site=message_site(KIND_CARRY, 4, True),
                                                              gid=torch.arange(N))
        comm = _Comm(1, {(0, _TAG): sent_h0, (2, _TAG + 1): sent_later})
        ahead = CarryAhead(comm, _stage(StageUnits.of(units, 2, 4)), D, wire, epoch=1)
        ahead.post_forward()
        carry = ahead.take_forward()
        fwd = [c for c in comm.log if c[0] == "isend"]
        assert len(fwd) == 1 and fwd[0][1:3] == (2, _TAG), fwd  # on to stage 2, before any compute
        assert torch.equal(fwd[0][3], sent_h0)  # the bytes as received: rounded once, where written
        want = h0 if not wire.lossy else wire.decode(sent_h0, D)
        assert torch.equal(carry["h0"], want)
        ahead.post_backward()
        assert ahead.grads_for_backward() == {}
        assert ("wait", "recv", 2, _TAG + 1) not in comm.log  # the backward does not wait for it
        ahead.send_grads({"h0": own})
        back = [c for c in comm.log if c[0] == "isend"][-1]
        assert back[1:3] == (0, _TAG + 1)
        total = own + (later if not wire.lossy else wire.decode(sent_later, D))
        if wire.lossy:
            total = wire.encode(total, epoch=1, site=message_site(KIND_CARRY, 2, True), gid=torch.arange(N))
        assert torch.equal(back[3], total)


class _Clock:
    """A clock that moves only while a receive is waited for (``_SlowComm``'s works)."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self):
        return self.now


class _SlowComm(_Comm):
    def __init__(self, rank, inbox, clock):
        super().__init__(rank, inbox)
        self.clock = clock

    def irecv(self, buf, src, tag, category):
        super().irecv(buf, src, tag, category)
        clock, log = self.clock, self.log

        class _Slow(_Work):
            def wait(self):
                clock.now += 0.5
                super().wait()
        return _Slow(log, ("recv", src, tag))


def test_waiting_for_a_carry_key_is_counted_as_waiting_and_nothing_else(monkeypatch):
    """The runtime books ``wait_s`` as waiting for a neighbour and the rest of the carry's
    calls as de/encoding: every receive's wait is in it, and only the waits."""
    from gnnpipe.parallel.pipeline import carry as carry_mod

    clock = _Clock()
    monkeypatch.setattr(carry_mod, "time", clock)
    units = _units()
    g = torch.Generator().manual_seed(1)
    comm = _SlowComm(1, {(0, _TAG): torch.randn(N, D, generator=g), (2, _TAG + 1): torch.randn(N, D, generator=g)},
                     clock)
    ahead = CarryAhead(comm, _stage(StageUnits.of(units, 2, 4)), D, FLOAT32, epoch=1)
    ahead.post_forward()
    ahead.take_forward()
    assert ahead.wait_s == 0.5
    ahead.post_backward()
    ahead.grads_for_backward()  # a handed-on key: nothing waited for here
    assert ahead.wait_s == 0.5
    ahead.send_grads({"h0": torch.zeros(N, D)})  # waits for the later stages' part
    assert ahead.wait_s == 1.0


def test_a_key_written_here_leaves_from_the_forward_and_its_gradient_enters_the_backward():
    units = _units()
    later = torch.randn(N, D)
    comm = _Comm(0, {(1, _TAG + 1): later})
    ahead = CarryAhead(comm, _stage(StageUnits.of(units, 0, 2)), D, FLOAT32, epoch=0)
    ahead.post_forward()
    assert ahead.take_forward() == {} and comm.log == []
    rows = torch.randn(N, D, requires_grad=True)
    ahead.send_ready("h0", rows)
    (_, dst, tag, t), = comm.log
    assert (dst, tag) == (1, _TAG) and torch.equal(t, rows.detach()) and not t.requires_grad
    ahead.post_backward()
    got = ahead.grads_for_backward()
    assert torch.equal(got["h0"], later) and ("wait", "recv", 1, _TAG + 1) in comm.log
    ahead.send_grads({})
    assert [c for c in comm.log if c[0] == "isend"] == [comm.log[0]]  # nothing goes before stage 0


def test_exact_epochs_on_four_stages_equal_the_oracle_and_send_h0_apart():
    from test_pipeline import _compare, stale_reference

    runs = [dict(model="gcnii", layers=4, epochs=6, chunks=4, exact_every=2, wire=w) for w in ("float32", "int8")]
    res = run_ranks("helpers.rankfns:many", 4, "torch", args={"fn": "pipeline_run", "runs": runs}, env=ENV,
                    timeout_s=300)
    f32 = [r[0] for r in res]
    ref = stale_reference(**runs[0])
    _compare(f32, ref, "exact_every=2, S=4 (h0 handed on by stages 1 and 2)")
    cfg = ref["cfg"]
    for i, run in enumerate(runs):
        ranks = [r[i] for r in res]
        got = sum(r["bytes"].get("pipe_act", 0) + r["bytes"].get("pipe_grad", 0) for r in ranks)  # epoch 0: exact
        want = pipeline_bytes(ranks[0]["num_nodes"], cfg.hidden, 4, h0=True, wire=run["wire"], carry_apart=True)
        assert got == want, f"{run['wire']}: {got} != {want}"
    n = f32[0]["num_nodes"]
    assert pipeline_bytes(n, 16, 4, h0=True, wire="int8", carry_apart=True) > pipeline_bytes(n, 16, 4, h0=True,
                                                                                             wire="int8")
    assert np.isfinite(res[0][1]["losses"]).all()
