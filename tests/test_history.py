"""The history buffers' rules (gnnpipe.parallel.pipeline.history.History), driven in one process,
rule by rule: no model, no chunks, no communication."""

from __future__ import annotations

import pytest
import torch

from gnnpipe._base import GnnpipeError
from gnnpipe.parallel.pipeline.history import History


def _history(snapshot_period=0, grad_fix=True, halo_rows=None):
    return History({1: 3, 4: 2}, rows=5, halo_rows=halo_rows, grad_fix=grad_fix, snapshot_period=snapshot_period)


def _epoch(hy: History, epoch: int, value: float, grad: float = 0.0) -> None:
    """One epoch as a stage drives it: the forward writes H (and R), the backward adds into G."""
    hy.begin_epoch(epoch)
    for pos in hy.hist:
        hy.hist[pos].fill_(value)
    for pos in hy.remote:
        hy.remote[pos].fill_(value + 100)
    hy.begin_backward()
    for g in list(hy.gacc.values()) + list(hy.gremote.values()):
        g.add_(grad)
    hy.end_epoch()


def test_without_a_snapshot_history_survives_into_the_next_epoch_and_gradients_are_dropped():
    hy = _history()
    _epoch(hy, 0, value=7.0, grad=2.0)
    hy.begin_epoch(1)
    assert all(float(h.min()) == float(h.max()) == 7.0 for h in hy.hist.values())  # last epoch's rows
    assert all(float(g.abs().max()) == 0.0 for g in hy.gacc.values())  # stale gradients dropped at the end
    assert all(g.data_ptr() != h.data_ptr() for g, h in zip(hy.gacc.values(), hy.hist.values()))


def test_without_grad_fix_there_are_no_gradient_buffers():
    hy = _history(grad_fix=False, halo_rows=4)
    assert hy.gacc == {} and hy.gremote == {} and set(hy.remote) == {1, 4}
    _epoch(hy, 0, value=1.0)
    assert hy.gacc == {}


@pytest.mark.parametrize("period", [1, 3])
def test_snapshot_is_taken_at_the_turn_of_epochs_k_minus_1_and_restored_every_epoch_after(period):
    hy = _history(snapshot_period=period, halo_rows=4)
    for e in range(period - 1):
        _epoch(hy, e, value=float(e))
        assert hy.snap is None, f"a snapshot before epoch {period - 1}"
    _epoch(hy, period - 1, value=5.0, grad=1.0)
    assert hy.snap is not None and all(float(s.max()) == float(s.min()) == 5.0 for s in hy.snap.values())
    assert all(float(s.max()) == 105.0 for s in hy.rsnap.values())
    # later epochs (not a snapshot epoch) start from the snapshot, whatever the last forward wrote
    if period > 1:
        _epoch(hy, period, value=9.0)
        hy.begin_epoch(period + 1)
        assert all(float(h.max()) == float(h.min()) == 5.0 for h in hy.hist.values())
        assert all(float(r.max()) == 105.0 for r in hy.remote.values())


def test_with_a_snapshot_gradients_live_in_the_history_storage_only_in_the_backward_phase():
    hy = _history(snapshot_period=1, halo_rows=4)
    _epoch(hy, 0, value=3.0)
    hy.begin_epoch(1)
    assert hy.gacc == {} and hy.gremote == {}  # H is live in the forward phase: no G
    hy.begin_backward()
    assert all(hy.gacc[p].data_ptr() == hy.hist[p].data_ptr() for p in hy.hist)
    assert all(hy.gremote[p].data_ptr() == hy.remote[p].data_ptr() for p in hy.remote)
    assert all(float(g.abs().max()) == 0.0 for g in hy.gacc.values())  # zeroed at the turn
    assert hy.begin_backward() is False  # the turn happens once per epoch
    hy.end_epoch()
    assert hy.gacc == {}


def test_state_dict_holds_what_the_next_epoch_reads_and_round_trips():
    hy = _history(snapshot_period=2, halo_rows=4)
    _epoch(hy, 0, value=4.0)
    sd = hy.state_dict()
    assert sd["snap"] is None and all(float(h.max()) == 4.0 for h in sd["hist"].values())
    other = _history(snapshot_period=2, halo_rows=4)
    other.load_state_dict(sd)
    assert all(torch.equal(other.hist[p], hy.hist[p]) for p in hy.hist)
    _epoch(hy, 1, value=6.0)  # a snapshot epoch: from now on the snapshot is what is saved
    sd = hy.state_dict()
    assert sd["hist"] == {} and all(float(s.max()) == 6.0 for s in sd["snap"].values())
    other = _history(snapshot_period=2, halo_rows=4)
    other.load_state_dict(sd)
    other.begin_epoch(2)
    assert all(float(h.max()) == float(h.min()) == 6.0 for h in other.hist.values())
    assert all(float(r.max()) == 106.0 for r in other.remote.values())


def test_a_checkpoint_without_remote_rows_is_refused_where_they_are_needed():
    hy = _history(halo_rows=4)
    sd = _history().state_dict()
    sd.pop("remote")
    with pytest.raises(GnnpipeError, match="no remote rows"):
        hy.load_state_dict(sd)
    with pytest.raises(GnnpipeError, match="without one of the remote rows"):
        hy.set_snapshot({1: torch.zeros(5, 3), 4: torch.zeros(5, 2)}, None)


def test_buffers_take_the_history_dtype():
    hy = History({2: 4}, rows=3, halo_rows=2, grad_fix=True, snapshot_period=1, dtype=torch.bfloat16)
    assert {t.dtype for t in [*hy.hist.values(), *hy.gacc.values(), *hy.remote.values(), *hy.gremote.values()]} == {
        torch.bfloat16}


def test_an_exact_epoch_writes_every_row_of_h_and_r_rounded_to_the_history_dtype():
    """Rule 8: an exact epoch's whole-part rows replace H_u, and the other ways' rows it
    exchanged replace R_u; what a stale epoch after it reads is exactly those rows."""
    hy = History({1: 3}, rows=5, halo_rows=4, grad_fix=True, snapshot_period=0, dtype=torch.bfloat16)
    hy.begin_epoch(0)
    rows = torch.randn(5, 3, requires_grad=True)
    halo = torch.randn(4, 3)
    hy.write_whole(1, rows * 1, halo)
    hy.end_epoch()
    hy.begin_epoch(1)
    assert torch.equal(hy.hist[1], rows.detach().to(torch.bfloat16))
    assert torch.equal(hy.remote[1], halo.to(torch.bfloat16))
    with pytest.raises(GnnpipeError, match="4 rows for a history of 5"):
        hy.write_whole(1, torch.zeros(4, 3), halo)
    with pytest.raises(GnnpipeError, match="need 4 halo rows"):
        hy.write_whole(1, torch.zeros(5, 3))
