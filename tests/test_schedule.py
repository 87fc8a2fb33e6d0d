"""Schedule tests with no communication at all: generator, lowering, validator, simulator.

Expected numbers come from the pipeline's analytic model, not from the implementation:
with unit forward/backward costs and free communication a GPipe-like epoch takes
``2·(C+S-1)`` steps, each stage is busy ``2C`` of them, so the bubble is
``(S-1)/(C+S-1)``.
"""

from __future__ import annotations

import itertools
import random
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gnnpipe import GnnpipeError
from gnnpipe.schedule import (
    Action,
    ActionKind,
    ScheduleError,
    chunk_order,
    gnnpipe_schedule,
    lower,
    render_grid,
    simulate,
    validate,
)

SIZES = [(S, C) for S in range(1, 7) for C in range(1, 10)]
K = ActionKind


def _order(C: int) -> list[int]:
    # A fixed non-identity order, so a generator that ignores `order` gets caught.
    return chunk_order(C, epoch=3, seed=11)


def _copy(schedule):
    return {s: list(v) for s, v in schedule.items()}


def _in_flight_peak(actions) -> int:
    peak = live = 0
    for a in actions:
        live += (a.kind is K.F) - (a.kind is K.B)
        peak = max(peak, live)
    return peak


# ----------------------------------------------------------------------------- actions


def test_action_text_round_trips_for_every_kind():
    actions = [Action(s, k, c) for s in range(4) for c in (0, 3, 17)
               for k in (K.F, K.B, K.SEND_F, K.RECV_B)]
    actions += [Action(s, k, c) for s in range(1, 4) for c in (0, 5) for k in (K.RECV_F, K.SEND_B)]
    actions += [Action(s, K.OPT) for s in range(4)]
    actions += [Action(1, K.SEND_F, 3, peer=4), Action(2, K.RECV_B, 0, peer=0)]
    for a in actions:
        assert Action.parse(str(a)) == a
        assert hash(Action.parse(str(a))) == hash(a)
    assert len(set(map(str, actions))) == len(actions)


def test_action_text_examples():
    assert str(Action(1, K.F, 3)) == "1F3"
    assert Action.parse("1B3") == Action(1, K.B, 3)
    assert Action.parse("2RECV_F3") == Action(2, K.RECV_F, 3, peer=1)
    assert Action.parse("1SEND_F3").peer == 2
    assert Action.parse("1SEND_B3").peer == 0
    assert Action.parse("1OPT") == Action(1, "OPT")
    assert Action.parse("1SEND_F3@4").peer == 4
    assert Action(1, "F", 3).kind is K.F  # kinds may be given as text


@pytest.mark.parametrize("text", ["", "F3", "1X3", "1F", "1OPT3x", "-1F3", "1 F 3", "1RECV_F", "1W3"])
def test_action_parse_rejects_bad_text(text):
    with pytest.raises(ScheduleError):
        Action.parse(text)


@pytest.mark.parametrize("kwargs, needle", [
    (dict(stage=0, kind=K.RECV_F, chunk=1), "stage 0"),   # no previous stage
    (dict(stage=0, kind=K.SEND_B, chunk=1), "peer"),
    (dict(stage=1, kind=K.OPT, chunk=2), "OPT"),
    (dict(stage=1, kind=K.F), "chunk"),
    (dict(stage=-1, kind=K.F, chunk=0), "stage"),
    (dict(stage=1, kind=K.F, chunk=0, peer=2), "peer"),
    (dict(stage=1, kind="Z", chunk=0), "kind"),
])
def test_action_rejects_bad_fields(kwargs, needle):
    with pytest.raises(ScheduleError, match=needle):
        Action(**kwargs)
    assert issubclass(ScheduleError, GnnpipeError)


# ----------------------------------------------------------------------------- generator


@pytest.mark.parametrize("S, C", SIZES)
def test_gnnpipe_schedule_is_valid_before_and_after_lowering(S, C):
    order = _order(C)
    compute = gnnpipe_schedule(S, order)
    validate(compute, S, C)
    lowered = lower(compute, S)
    validate(lowered, S, C)
    for s in range(S):
        assert [a.chunk for a in compute[s] if a.kind is K.F] == order
        # Backward in reverse forward order, every chunk alive until the backward phase.
        assert [a.chunk for a in compute[s] if a.kind is K.B] == order[::-1]
        assert _in_flight_peak(compute[s]) == C
        assert compute[s][-1] == Action(s, K.OPT)
        # Lowering only adds communication: the compute order is untouched.
        assert [a for a in lowered[s] if a.kind.is_compute] == compute[s]


@pytest.mark.parametrize("S, C", SIZES)
def test_gnnpipe_bubble_is_analytic(S, C):
    result = simulate(lower(gnnpipe_schedule(S, _order(C)), S), S)
    assert result.bubble_fraction == Fraction(S - 1, C + S - 1)
    assert result.makespan == 2 * (C + S - 1)
    assert result.steps == 2 * (C + S - 1)
    assert result.busy == [2 * C] * S
    assert result.idle == [2 * (S - 1)] * S
    # Stage 0 runs the first forward and the last backward: it waits the whole bubble.
    assert result.wait[0] == 2 * (S - 1)
    assert all(0 <= w <= 2 * (S - 1) for w in result.wait)


@pytest.mark.parametrize("S, C", [(1, 1), (2, 5), (4, 3), (3, 8), (6, 2)])
def test_unequal_forward_backward_costs(S, C):
    # Forward pipeline fills in C+S-1 forward slots, backward drains in C+S-1 backward ones.
    cost = lambda a: 2 if a.kind is K.B else 1  # noqa: E731
    result = simulate(lower(gnnpipe_schedule(S, _order(C)), S), S, compute_time=cost)
    assert result.makespan == 3 * (C + S - 1)
    assert result.busy == [3 * C] * S


@pytest.mark.parametrize("S, C", [(2, 1), (2, 4), (4, 3), (5, 9)])
def test_comm_time_adds_two_hops_per_boundary(S, C):
    # With comm c <= compute, each of the S-1 boundaries delays the first forward and the
    # first backward by c; the links never queue (one message per compute slot).
    c = Fraction(1, 2)
    result = simulate(lower(gnnpipe_schedule(S, _order(C)), S), S, comm_time=c)
    assert result.makespan == 2 * (C + S - 1) + 2 * (S - 1) * c
    assert result.busy == [2 * C] * S


def test_slow_link_serialises_messages():
    # Comm 3 per message on a 2-stage pipeline: stage 1 gets chunk k at 1 + 3(k+1).
    result = simulate(lower(gnnpipe_schedule(2, [0, 1, 2]), 2), 2, comm_time=3)
    starts = {str(e.action): e.start for e in result.timeline}
    assert [starts[f"1F{k}"] for k in range(3)] == [4, 7, 10]


def test_simulate_lowers_compute_only_schedules():
    compute = gnnpipe_schedule(3, [1, 0, 2])
    assert simulate(compute, 3) == simulate(lower(compute, 3), 3)


def test_optimizer_step_is_optional_and_free_by_default():
    plain = gnnpipe_schedule(3, [0, 1])
    bare = gnnpipe_schedule(3, [0, 1], optimizer_step=False)
    assert all(K.OPT not in [a.kind for a in bare[s]] for s in range(3))
    validate(bare, 3, 2)
    assert simulate(plain, 3).makespan == simulate(bare, 3).makespan
    assert simulate(plain, 3, opt_time=5).makespan == simulate(bare, 3).makespan + 5


@pytest.mark.parametrize("bad", [
    lambda: gnnpipe_schedule(0, [0]),
    lambda: gnnpipe_schedule(2, []),
    lambda: gnnpipe_schedule(2, [0, 0, 1]),
    lambda: gnnpipe_schedule(2, [1, 2]),
    lambda: chunk_order(0, 0, 0),
    lambda: simulate(gnnpipe_schedule(2, [0]), 2, comm_time=-1),
    lambda: lower({0: []}, 2),
])
def test_bad_sizes_raise(bad):
    with pytest.raises(ScheduleError):
        bad()


# ----------------------------------------------------------------------------- lowering


def test_lowering_places_comm_next_to_compute():
    lowered = lower(gnnpipe_schedule(3, [1, 0]), 3)
    assert [str(a) for a in lowered[1]] == [
        "1RECV_F1", "1F1", "1SEND_F1", "1RECV_F0", "1F0", "1SEND_F0",
        "1RECV_B0", "1B0", "1SEND_B0", "1RECV_B1", "1B1", "1SEND_B1", "1OPT",
    ]
    assert [str(a) for a in lowered[0]][:2] == ["0F1", "0SEND_F1"]
    assert [str(a) for a in lowered[2]][-3:] == ["2B1", "2SEND_B1", "2OPT"]


def test_lowering_twice_is_refused():
    lowered = lower(gnnpipe_schedule(2, [0]), 2)
    with pytest.raises(ScheduleError, match="already has communication"):
        lower(lowered, 2)


# ----------------------------------------------------------------------------- validator


def _error(schedule, S, C) -> str:
    with pytest.raises(ScheduleError) as info:
        validate(schedule, S, C)
    message = str(info.value)
    assert "stage 0" in message and "| stage" in message  # the grid is in the message
    assert ">>" in message
    return message


@pytest.mark.parametrize("lowered", [False, True])
def test_validator_catches_missing_backward(lowered):
    S, C = 3, 4
    sched = gnnpipe_schedule(S, [2, 0, 3, 1])
    sched = _copy(lower(sched, S) if lowered else sched)
    sched[1].remove(Action(1, K.B, 3))
    message = _error(sched, S, C)
    assert "0 x 1B3" in message


@pytest.mark.parametrize("lowered", [False, True])
def test_validator_catches_backward_before_forward(lowered):
    S, C = 2, 3
    sched = _copy(gnnpipe_schedule(S, [0, 1, 2]))
    f, b = Action(0, K.F, 2), Action(0, K.B, 2)
    i, j = sched[0].index(f), sched[0].index(b)
    sched[0][i], sched[0][j] = b, f
    if lowered:
        sched = lower(sched, S)
    message = _error(sched, S, C)
    assert ">>0B2" in message and "before" in message


def test_validator_catches_duplicated_forward():
    sched = _copy(gnnpipe_schedule(2, [0, 1]))
    sched[1].insert(0, Action(1, K.F, 1))
    assert "2 x 1F1" in _error(sched, 2, 2)


def test_validator_catches_action_in_wrong_stage_list():
    sched = _copy(gnnpipe_schedule(2, [0, 1]))
    sched[1][0] = Action(0, K.F, 0)
    assert "names stage 0" in _error(sched, 2, 2)


def test_validator_catches_different_chunk_order_per_stage():
    sched = _copy(gnnpipe_schedule(3, [0, 1, 2]))
    sched[2] = gnnpipe_schedule(3, [0, 2, 1])[2]
    assert "same F chunk order" in _error(sched, 3, 3)


def test_validator_catches_compute_before_its_receive():
    sched = _copy(lower(gnnpipe_schedule(2, [0, 1]), 2))
    i = sched[1].index(Action(1, K.RECV_F, 1))
    sched[1][i], sched[1][i + 1] = sched[1][i + 1], sched[1][i]
    assert ">>1F1" in _error(sched, 2, 2)


def test_validator_catches_send_before_the_compute_that_produces_it():
    # The simulator alone would accept it (sends are free); the data would not exist yet.
    sched = _copy(lower(gnnpipe_schedule(2, [0, 1]), 2))
    i = sched[0].index(Action(0, K.SEND_F, 1))
    sched[0][i - 1], sched[0][i] = sched[0][i], sched[0][i - 1]
    simulate(sched, 2)
    assert ">>0SEND_F1" in _error(sched, 2, 2)


def test_validator_catches_cross_stage_cycle():
    # Same chunk orders everywhere, F before B everywhere, and yet stage 0 waits for 1B0
    # before sending chunk 1, which stage 1 needs before it reaches 1B0.
    sched = {0: [Action.parse(t) for t in ("0F0", "0B0", "0F1", "0B1")],
             1: [Action.parse(t) for t in ("1F0", "1F1", "1B0", "1B1")]}
    with pytest.raises(ScheduleError, match="deadlock") as info:
        validate(sched, 2, 2)
    assert ">>0RECV_B0" in str(info.value) and ">>1RECV_F1" in str(info.value)


def test_validator_catches_receive_without_send_and_simulator_deadlocks():
    sched = _copy(lower(gnnpipe_schedule(3, [0, 1, 2]), 3))
    sched[0].remove(Action(0, K.SEND_F, 1))
    assert "0 x 0SEND_F1" in _error(sched, 3, 3)
    with pytest.raises(ScheduleError) as info:
        simulate(sched, 3)
    message = str(info.value)
    assert "deadlock" in message
    assert "1RECV_F1 waits for 0SEND_F1, which stage 0's list never contains" in message
    assert ">>1RECV_F1" in message and "| stage 2" in message


def test_simulator_rejects_send_never_received():
    sched = _copy(lower(gnnpipe_schedule(2, [0, 1]), 2))
    sched[1].remove(Action(1, K.RECV_F, 0))
    with pytest.raises(ScheduleError):  # 1F0 now runs on data that never arrives
        validate(sched, 2, 2)
    with pytest.raises(ScheduleError, match="never receives"):
        simulate(sched, 2)


def test_validator_catches_wrong_peer_and_chunk_range():
    sched = _copy(lower(gnnpipe_schedule(3, [0, 1]), 3))
    i = sched[1].index(Action(1, K.RECV_F, 0))
    sched[1][i] = Action(1, K.RECV_F, 0, peer=2)
    assert "talks to stage 2" in _error(sched, 3, 2)
    assert "chunk < C=1" in _error(gnnpipe_schedule(3, [0, 1]), 3, 1)


def test_validator_catches_misplaced_optimizer_step():
    sched = _copy(gnnpipe_schedule(2, [0, 1]))
    sched[1].insert(0, sched[1].pop())
    assert "optimizer" in _error(sched, 2, 2)
    sched = _copy(gnnpipe_schedule(2, [0, 1]))
    sched[0].pop()
    assert "OPT" in _error(sched, 2, 2)


def test_validator_wants_every_stage():
    with pytest.raises(ScheduleError, match="keys"):
        validate({0: gnnpipe_schedule(2, [0])[0]}, 2, 1)


# ----------------------------------------------------------------------------- printing


def test_grid_of_a_schedule_has_one_row_per_step_and_marks():
    sched = lower(gnnpipe_schedule(3, [0, 1]), 3)
    grid = render_grid(sched, mark=Action(1, K.F, 1))
    lines = grid.splitlines()
    assert [c.strip() for c in lines[0].split("|")] == ["step", "stage 0", "stage 1", "stage 2"]
    assert len(lines) == 2 + max(len(v) for v in sched.values())
    marked = [ln for ln in lines if ln.endswith("<==")]
    assert len(marked) == 1 and ">>1F1" in marked[0]
    row = int(marked[0].split("|")[0])
    assert sched[1][row] == Action(1, K.F, 1)
    assert render_grid(sched, mark=3).splitlines()[2 + 3].endswith("<==")


def test_grid_of_a_timeline_shows_each_action_once_at_its_time():
    S, C = 3, 4
    result = simulate(lower(gnnpipe_schedule(S, _order(C)), S), S)
    grid = result.grid(comm=False)
    cells = [c.strip() for ln in grid.splitlines()[2:] for c in ln.split("|")[1:]]
    words = [w for c in cells for w in c.split()]
    expected = [str(e.action) for e in result.timeline if e.action.kind.is_compute]
    assert sorted(words) == sorted(expected)
    times = [ln.split("|")[0].strip() for ln in grid.splitlines()[2:]]
    # One row per compute time slot, plus the (free) optimizer steps at the end.
    assert times == [str(t) for t in range(result.steps + 1)]
    full = render_grid(result)
    assert "0SEND_F" in full and "RECV_B" in full


def test_grid_shows_long_actions_as_running():
    result = simulate(gnnpipe_schedule(1, [0]), 1, compute_time=lambda a: 3 if a.kind is K.F else 1)
    assert render_grid(result, comm=False).splitlines()[2:] == [
        "   0 | 0F0", "   3 | 0B0", "   4 | 0OPT"]
    # Stage 1 takes 2 per chunk: at time 2 stage 0 starts 0F2 while 1F0 (1..3) still runs.
    result = simulate(gnnpipe_schedule(2, [0, 1, 2]), 2, compute_time=lambda a: 1 + a.stage)
    rows = {ln.split("|")[0].strip(): [c.strip() for c in ln.split("|")[1:]]
            for ln in render_grid(result, comm=False).splitlines()[2:]}
    assert rows["2"] == ["0F2", "..."]
    assert rows["1"] == ["0F1", "1F0"]


# ----------------------------------------------------------------------------- chunk order


@pytest.mark.parametrize("C", range(1, 10))
def test_chunk_order_is_a_deterministic_permutation(C):
    for seed, epoch in itertools.product((0, 1, 12345), (0, 1, 7)):
        order = chunk_order(C, epoch, seed)
        assert sorted(order) == list(range(C))
        assert chunk_order(C, epoch, seed) == order
    assert chunk_order(C, 5, 3, shuffle=False) == list(range(C))


@pytest.mark.parametrize("C", range(2, 10))
def test_chunk_order_changes_across_epochs_and_seeds(C):
    by_epoch = {tuple(chunk_order(C, e, seed=0)) for e in range(40)}
    by_seed = {tuple(chunk_order(C, 0, seed=s)) for s in range(40)}
    # 40 draws from C! orders: at least 2 distinct ones (all of them for C=2).
    assert len(by_epoch) >= 2 and len(by_seed) >= 2
    if C >= 5:  # 40 draws from >= 120 permutations rarely repeat much
        assert len(by_epoch) > 30 and len(by_seed) > 30


def test_chunk_order_does_not_touch_global_random_state():
    random.seed(99)
    expected = random.random()
    random.seed(99)
    chunk_order(9, 1, 2)
    assert random.random() == expected


# ----------------------------------------------------------------------------- properties


@settings(max_examples=60, deadline=None)
@given(S=st.integers(1, 8), C=st.integers(1, 12), data=st.data())
def test_random_sizes_and_orders(S, C, data):
    order = data.draw(st.permutations(range(C)))
    compute = gnnpipe_schedule(S, order)
    validate(compute, S, C)
    lowered = lower(compute, S)
    validate(lowered, S, C)
    result = simulate(lowered, S)
    assert result.bubble_fraction == Fraction(S - 1, C + S - 1)
    assert result.makespan == 2 * (C + S - 1)
    assert result.busy == [2 * C] * S


@settings(max_examples=40, deadline=None)
@given(S=st.integers(1, 5), C=st.integers(1, 8), data=st.data())
def test_random_costs_never_deadlock_and_respect_dependencies(S, C, data):
    order = data.draw(st.permutations(range(C)))
    costs = data.draw(st.lists(st.integers(1, 5), min_size=2 * S, max_size=2 * S))
    comm = data.draw(st.integers(0, 3))
    cost = lambda a: costs[2 * a.stage + (a.kind is K.B)]  # noqa: E731
    result = simulate(lower(gnnpipe_schedule(S, order), S), S, compute_time=cost,
                      comm_time=comm)
    when = {e.action: e for e in result.timeline}
    for a, e in when.items():
        # A chunk reaches stage s only after stage s-1 computed it, plus the transfer.
        if a.kind is K.F and a.stage > 0:
            assert e.start >= when[Action(a.stage - 1, K.F, a.chunk)].end + comm
        if a.kind is K.B and a.stage < S - 1:
            assert e.start >= when[Action(a.stage + 1, K.B, a.chunk)].end + comm
    assert result.makespan >= max(result.busy)
    assert sum(result.idle) == S * result.makespan - sum(result.busy)
