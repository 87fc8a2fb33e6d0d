"""The pipeline schedule as data: actions, the generator, lowering, validation, simulation.

Over 600 lines on purpose: one cohesive algebra over :class:`Action` (the validator runs the
simulator, every error prints the grid), with no I/O; its numbered layers below are the seams.

A pipeline epoch is described by one list of :class:`Action` values per stage. The
pipeline runtime executes ``lower(...)[my_stage]`` action by action; everything here is
pure Python (no processes, no communication, no I/O), so every schedule can be printed,
validated and simulated in a unit test.

The layers of the design (after ``torch.distributed.pipelining``'s ``_Action`` /
``_add_send_recv`` / ``_PipelineScheduleRuntime``):

1. **Compute schedule** (:func:`gnnpipe_schedule`, the only generator: the pipeline runtime
   runs nothing else) says in which order each stage runs ``F`` (forward of its layer
   block on one chunk), ``B`` (backward) and ``OPT`` (the optimizer step, once per epoch).
2. **Lowering** (:func:`lower`) inserts the point-to-point actions ``SEND_F``/``RECV_F``
   (chunk activations, stage ``s`` to ``s+1``) and ``SEND_B``/``RECV_B`` (their gradients,
   stage ``s+1`` to ``s``).
3. **Validation** (:func:`validate`) checks counts, per-stage order, the pairing of sends
   and receives, and runs the simulator to rule out deadlocks.
4. **Simulation** (:func:`simulate`) replays a lowered schedule with per-action costs and
   reports the makespan, busy/idle time per stage and the bubble fraction.
5. **Printing** (:func:`render_grid`): a time-step x stage text grid; every
   :class:`ScheduleError` carries one with the offending actions marked.

Communication model (what the runtime must honour for the simulation to be faithful):

* ``SEND_*`` is non-blocking: the stage posts the send and goes on at once (it overlaps the
  next compute). The runtime must keep the send handles and wait for them only at the end
  of the epoch (or before reusing the buffer), never right after posting: waiting at once
  turns a send into a rendezvous and can deadlock schedules that this simulator accepts.
* ``RECV_*`` is placed immediately before the first compute that needs the data and means
  "block until this message is here". The runtime may pre-post the matching ``irecv``
  earlier (e.g. at the start of the epoch) as an optimisation; the action marks where the
  data must have arrived, which is all the dependency model needs.
* Messages between the same two stages in the same direction travel in posting order over
  one full-duplex link, each occupying it for ``comm_time``.

The historical-embedding semantics of the compute order are documented on
:func:`gnnpipe_schedule`. A new schedule needs a generator here *and* a runtime that honours
its semantics: the pipeline stage refuses a forward after its backward phase began.
"""

from __future__ import annotations

import enum
import hashlib
import random
import re
from collections import deque
from dataclasses import dataclass
from fractions import Fraction
from numbers import Rational
from typing import Callable, Iterable, Mapping, NamedTuple, Sequence, Union

from gnnpipe._base import GnnpipeError

__all__ = [
    "Action",
    "ActionKind",
    "Schedule",
    "ScheduleError",
    "SimResult",
    "TimelineEntry",
    "chunk_order",
    "gnnpipe_schedule",
    "lower",
    "render_grid",
    "simulate",
    "validate",
]


class ScheduleError(GnnpipeError):
    """An invalid or deadlocking schedule, or bad sizes given to a generator.

    The message contains the schedule as a grid (see :func:`render_grid`) with the
    offending actions marked ``>>``.
    """


class ActionKind(str, enum.Enum):
    """What a stage does in one action.

    ``F``/``B`` run the stage's layer block forward/backward on one chunk; ``OPT`` is the
    stage's optimizer step at the end of the epoch (no chunk).
    ``SEND_F``/``RECV_F`` move a chunk's activations from stage ``s`` to ``s+1``;
    ``SEND_B``/``RECV_B`` move their gradients from stage ``s+1`` back to ``s``.
    """

    F = "F"
    B = "B"
    OPT = "OPT"
    SEND_F = "SEND_F"
    RECV_F = "RECV_F"
    SEND_B = "SEND_B"
    RECV_B = "RECV_B"

    @property
    def is_comm(self) -> bool:
        return self in _PEER_OFFSET

    @property
    def is_compute(self) -> bool:
        return not self.is_comm

    def __str__(self) -> str:
        return self.value


# The only peer each communication kind can have: activations flow to higher stages,
# gradients to lower ones.
_PEER_OFFSET = {
    ActionKind.SEND_F: +1,
    ActionKind.RECV_F: -1,
    ActionKind.SEND_B: -1,
    ActionKind.RECV_B: +1,
}
# Longest names first so that "SEND_F" is not read as "S" + ... and "OPT" before "F".
_ACTION_RE = re.compile(
    r"^(\d+)(SEND_F|RECV_F|SEND_B|RECV_B|OPT|F|B)(\d+)?(?:@(\d+))?$"
)


@dataclass(frozen=True)
class Action:
    """One step of one stage.

    Text form (round-trips through :meth:`parse`): ``"<stage><KIND><chunk>"``, e.g.
    ``"1F3"`` (stage 1, forward, chunk 3), ``"1B3"``, ``"1SEND_F3"``, ``"2RECV_F3"``,
    ``"1OPT"``. A communication action whose peer is not the adjacent stage in its
    direction appends ``"@<peer>"`` (such actions are rejected by :func:`validate` but can
    still be printed, so a broken schedule can be shown).

    Args:
        stage (int): The stage that executes the action (>= 0).
        kind (ActionKind or str): What it does.
        chunk (int, optional): The chunk; required for every kind except ``OPT``.
        peer (int, optional): For communication kinds, the other stage; defaults to the
            adjacent stage in the data's direction (``s+1`` for ``SEND_F``/``RECV_B``,
            ``s-1`` for ``RECV_F``/``SEND_B``). Must be ``None`` for compute kinds.
    """

    stage: int
    kind: ActionKind
    chunk: int | None = None
    peer: int | None = None

    def __post_init__(self) -> None:
        try:
            kind = ActionKind(self.kind)
        except ValueError:
            raise ScheduleError(
                f"Action kind: expected one of {[k.value for k in ActionKind]}, "
                f"got {self.kind!r}"
            ) from None
        object.__setattr__(self, "kind", kind)
        if not isinstance(self.stage, int) or self.stage < 0:
            raise ScheduleError(f"Action stage: expected an int >= 0, got {self.stage!r}")
        if kind is ActionKind.OPT:
            if self.chunk is not None:
                raise ScheduleError(f"Action OPT takes no chunk, got chunk={self.chunk!r}")
        elif not isinstance(self.chunk, int) or self.chunk < 0:
            raise ScheduleError(
                f"Action {kind.value} on stage {self.stage}: expected a chunk int >= 0, "
                f"got {self.chunk!r}"
            )
        if kind.is_comm:
            peer = self.stage + _PEER_OFFSET[kind] if self.peer is None else self.peer
            if not isinstance(peer, int) or peer < 0:
                raise ScheduleError(
                    f"Action {kind.value} on stage {self.stage}: expected a peer stage "
                    f">= 0, got {peer!r} (stage 0 neither receives activations nor "
                    f"sends gradients)"
                )
            object.__setattr__(self, "peer", peer)
        elif self.peer is not None:
            raise ScheduleError(
                f"Action {kind.value}: compute actions take no peer, got peer={self.peer!r}"
            )

    @property
    def default_peer(self) -> bool:
        """Whether a communication action talks to the adjacent stage in its direction."""
        return self.kind.is_comm and self.peer == self.stage + _PEER_OFFSET[self.kind]

    def __str__(self) -> str:
        text = f"{self.stage}{self.kind.value}"
        if self.chunk is not None:
            text += str(self.chunk)
        if self.kind.is_comm and not self.default_peer:
            text += f"@{self.peer}"
        return text

    def __repr__(self) -> str:
        return f"Action.parse({str(self)!r})"

    @classmethod
    def parse(cls, text: str) -> "Action":
        """Read the compact text form written by ``str(action)``.

        Args:
            text (str): E.g. ``"1F3"``, ``"0SEND_F2"``, ``"3OPT"``, ``"1SEND_F3@4"``.

        Returns:
            Action: The action; ``Action.parse(str(a)) == a`` for every action ``a``.
        """
        match = _ACTION_RE.match(text.strip())
        if match is None:
            raise ScheduleError(
                f"action text: expected '<stage><KIND>[<chunk>][@<peer>]' with KIND in "
                f"{[k.value for k in ActionKind]}, e.g. '1F3', got {text!r}"
            )
        stage, kind, chunk, peer = match.groups()
        return cls(
            int(stage),
            ActionKind(kind),
            None if chunk is None else int(chunk),
            None if peer is None else int(peer),
        )


Schedule = dict[int, list[Action]]
"""One list of actions per stage, in execution order: ``schedule[stage][i]``."""

Cost = Union[float, int, Fraction, Callable[[Action], Union[float, int, Fraction]]]


# --------------------------------------------------------------------------- generator


def chunk_order(C: int, epoch: int, seed: int, shuffle: bool = True) -> list[int]:
    """The order in which the chunks go through the pipeline in one epoch.

    A pure function of ``(C, epoch, seed)``, so every stage (and the one-process
    reference) computes the same permutation without communicating. The generator is
    seeded from a SHA-256 of the arguments, not from Python's ``hash`` (randomised per
    process) nor from global RNG state.

    Args:
        C (int): Number of chunks (>= 1).
        epoch (int): Epoch index.
        seed (int): The run's shared seed.
        shuffle (bool): ``False`` gives the identity order ``[0, ..., C-1]``.

    Returns:
        list[int]: A permutation of ``range(C)``.
    """
    _check_size("chunks", C)
    order = list(range(C))
    if shuffle:
        digest = hashlib.sha256(f"gnnpipe.chunk_order:{int(seed)}:{int(epoch)}".encode())
        random.Random(int.from_bytes(digest.digest()[:8], "big")).shuffle(order)
    return order


def gnnpipe_schedule(S: int, order: Sequence[int], optimizer_step: bool = True) -> Schedule:
    """GNNPipe's compute order: all forwards in ``order``, then all backwards in reverse.

    GPipe-like, one flush per epoch. Reverse backward order is what the historical
    embeddings need: when chunk ``c`` aggregated, its neighbours in chunks processed
    earlier this epoch were *fresh*, so ``c``'s backward produces gradients for those
    chunks' rows; running ``c``'s backward before theirs lets those gradients reach them
    (the others were historical, their gradients stale and dropped at epoch end).

    With unit forward/backward costs and free communication the epoch takes
    ``2·(C+S-1)`` steps and the bubble fraction is ``(S-1)/(C+S-1)``.

    Args:
        S (int): Number of stages (>= 1).
        order (Sequence[int]): The epoch's chunk order, a permutation of ``range(C)``.
        optimizer_step (bool): Append one ``OPT`` per stage at the end.

    Returns:
        Schedule: ``{stage: [F.., B.., OPT]}`` (compute actions only; see :func:`lower`).
    """
    order = _check_order(S, order)
    schedule: Schedule = {}
    for s in range(S):
        actions = [Action(s, ActionKind.F, c) for c in order]
        actions += [Action(s, ActionKind.B, c) for c in reversed(order)]
        schedule[s] = actions + _opt(s, optimizer_step)
    return schedule


def _opt(stage: int, optimizer_step: bool) -> list[Action]:
    return [Action(stage, ActionKind.OPT)] if optimizer_step else []


def _check_size(name: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ScheduleError(f"{name}: expected an int >= 1, got {value!r}")


def _check_order(S: int, order: Sequence[int]) -> list[int]:
    _check_size("stages", S)
    order = list(order)
    _check_size("chunks (len(order))", len(order))
    if sorted(order) != list(range(len(order))):
        raise ScheduleError(
            f"chunk order: expected a permutation of range({len(order)}), got {order}"
        )
    return order


# --------------------------------------------------------------------------- lowering


def lower(compute_schedule: Mapping[int, Sequence[Action]], S: int) -> Schedule:
    """Insert the sends and receives between stages into a compute-only schedule.

    Per compute action on stage ``s``:
    ``RECV_F c`` right before ``F c`` (``s > 0``), ``SEND_F c`` right after it
    (``s < S-1``); ``RECV_B c`` right before ``B c`` (``s < S-1``), ``SEND_B c`` right after
    it (``s > 0``). Sends are non-blocking, so a send overlaps the next compute; each
    receive sits just before the compute that needs it (see the module docstring for
    pre-posting).

    Args:
        compute_schedule (Mapping[int, Sequence[Action]]): Compute actions per stage.
        S (int): Number of stages.

    Returns:
        Schedule: The lowered schedule, ``{stage: [actions]}``, a new dict of new lists.
    """
    _check_size("stages", S)
    _check_stage_keys(compute_schedule, S)
    lowered: Schedule = {}
    for s in range(S):
        actions = list(compute_schedule[s])
        comm = [a for a in actions if a.kind.is_comm]
        if comm:
            raise ScheduleError(
                f"lower: stage {s} already has communication actions (e.g. {comm[0]}); "
                f"lower a compute-only schedule\n" + render_grid(compute_schedule, mark=comm)
            )
        lowered[s] = _lower_stage(s, S, actions)
    return lowered


def _comm(stage: int, kind: ActionKind, chunk: int) -> Action:
    return Action(stage, kind, chunk)


def _lower_stage(s: int, S: int, actions: list[Action]) -> list[Action]:
    out: list[Action] = []
    for a in actions:
        if a.kind is ActionKind.F:
            if s > 0:
                out.append(_comm(s, ActionKind.RECV_F, a.chunk))
            out.append(a)
            if s < S - 1:
                out.append(_comm(s, ActionKind.SEND_F, a.chunk))
        elif a.kind is ActionKind.B:
            if s < S - 1:
                out.append(_comm(s, ActionKind.RECV_B, a.chunk))
            out.append(a)
            if s > 0:
                out.append(_comm(s, ActionKind.SEND_B, a.chunk))
        else:
            out.append(a)
    return out


def _check_stage_keys(schedule: Mapping[int, Sequence[Action]], S: int) -> None:
    if set(schedule) != set(range(S)):
        raise ScheduleError(
            f"schedule stages: expected exactly the keys {list(range(S))}, "
            f"got {sorted(schedule, key=repr)}"
        )


# --------------------------------------------------------------------------- validation


def validate(schedule: Mapping[int, Sequence[Action]], S: int, C: int) -> None:
    """Check a compute-only or lowered schedule; raise :class:`ScheduleError` if invalid.

    Checks, in order (the first failure is reported, with the grid and the culprit
    marked):

    * the keys are the stages ``0..S-1`` and every action sits in its own stage's list,
      with ``chunk < C`` and, for communication, the adjacent peer in the data's direction;
    * every (stage, chunk) has exactly one ``F`` and one ``B``, ``F`` before ``B``; either
      no stage or every stage has exactly one ``OPT``, after all its ``F``/``B``;
    * every stage uses the same forward order and the same backward order (the chunk
      order decides which neighbours are fresh; it must be the same on every stage for the
      pipeline to compute what the one-process reference computes);
    * lowered form (any communication action present): each stage ``s > 0`` has exactly
      one ``RECV_F c`` per chunk, before its ``F c``, matched by exactly one ``SEND_F c`` on
      ``s-1`` after its ``F c``; gradients likewise in the other direction; nothing else;
    * for ``S > 1``: the (lowered, if needed) schedule is simulated, which reports
      deadlocks, i.e. a stage waiting for something that is never sent or sent only after
      a wait that depends on it.

    Args:
        schedule (Mapping[int, Sequence[Action]]): Actions per stage.
        S (int): Number of stages.
        C (int): Number of chunks.
    """
    _check_size("stages", S)
    _check_size("chunks", C)
    _check_stage_keys(schedule, S)

    def fail(message: str, mark: Iterable[Action]) -> None:
        raise ScheduleError(f"invalid schedule (S={S}, C={C}): {message}\n"
                            + render_grid(schedule, mark=list(mark)))

    lowered = any(a.kind.is_comm for s in range(S) for a in schedule[s])
    for s in range(S):
        for a in schedule[s]:
            if not isinstance(a, Action):
                fail(f"stage {s} holds {a!r}, expected Action values", [])
            if a.stage != s:
                fail(f"{a} is in stage {s}'s list but names stage {a.stage}", [a])
            if a.chunk is not None and a.chunk >= C:
                fail(f"{a} names chunk {a.chunk}, expected a chunk < C={C}", [a])
            if a.kind.is_comm and not a.default_peer:
                fail(f"{a} talks to stage {a.peer}, expected stage "
                     f"{a.stage + _PEER_OFFSET[a.kind]} (activations go s -> s+1, "
                     f"gradients s+1 -> s)", [a])
            if a.kind.is_comm and not 0 <= a.peer < S:
                fail(f"{a} talks to stage {a.peer}, which does not exist (S={S})", [a])

    # Positions of each (kind, chunk) per stage.
    index: list[dict[tuple[ActionKind, int | None], list[int]]] = []
    for s in range(S):
        where: dict[tuple[ActionKind, int | None], list[int]] = {}
        for i, a in enumerate(schedule[s]):
            where.setdefault((a.kind, a.chunk), []).append(i)
        index.append(where)

    has_opt = [bool(index[s].get((ActionKind.OPT, None))) for s in range(S)]
    for s in range(S):
        acts = schedule[s]
        where = index[s]
        for c in range(C):
            for kind in (ActionKind.F, ActionKind.B):
                n = len(where.get((kind, c), []))
                if n != 1:
                    culprit = Action(s, kind, c)
                    other = Action(s, ActionKind.F if kind is ActionKind.B else ActionKind.B, c)
                    fail(f"stage {s} has {n} x {culprit}, expected exactly one "
                         f"{kind.value} per (stage, chunk)", [culprit] if n else [other])
            f_at, b_at = where[(ActionKind.F, c)][0], where[(ActionKind.B, c)][0]
            if b_at < f_at:
                fail(f"{acts[b_at]} comes before {acts[f_at]} on stage {s}: a chunk's "
                     f"backward needs its forward", [acts[b_at]])
        opts = where.get((ActionKind.OPT, None), [])
        if len(opts) > 1 or (any(has_opt) and not opts):
            fail(f"stage {s} has {len(opts)} OPT actions, expected "
                 f"{'exactly one (other stages have one)' if any(has_opt) else 'at most one'}",
                 # None missing: mark where it belongs (after the stage's last action).
                 [acts[i] for i in opts] or acts[-1:])
        if opts:
            last_compute = max(i for i, a in enumerate(acts)
                               if a.kind in (ActionKind.F, ActionKind.B))
            if opts[0] < last_compute:
                fail(f"{acts[opts[0]]} comes before {acts[last_compute]}: the optimizer "
                     f"steps once, after every chunk's gradient is accumulated",
                     [acts[opts[0]]])

    for kind in (ActionKind.F, ActionKind.B):
        reference = [a.chunk for a in schedule[0] if a.kind is kind]
        for s in range(1, S):
            mine = [a for a in schedule[s] if a.kind is kind]
            for want, got in zip(reference, mine):
                if got.chunk != want:
                    fail(f"stage {s} runs {got} where stage 0 runs {kind.value}{want}: every "
                         f"stage must use the same {kind.value} chunk order "
                         f"(stage 0: {reference}, stage {s}: {[a.chunk for a in mine]})",
                         [got])

    if lowered:
        _validate_comm(schedule, S, C, index, fail)

    if S > 1:
        simulate(schedule if lowered else lower(schedule, S), S)


def _validate_comm(schedule, S, C, index, fail) -> None:
    """The lowered-form checks of :func:`validate`: sends and receives pair up."""
    rules = (
        # (comm kind, compute it serves, comm before compute?, stages that must have it)
        (ActionKind.RECV_F, ActionKind.F, True, lambda s: s > 0),
        (ActionKind.SEND_F, ActionKind.F, False, lambda s: s < S - 1),
        (ActionKind.RECV_B, ActionKind.B, True, lambda s: s < S - 1),
        (ActionKind.SEND_B, ActionKind.B, False, lambda s: s > 0),
    )
    for s in range(S):
        acts = schedule[s]
        for comm, comp, before, needed in rules:
            for c in range(C):
                at = index[s].get((comm, c), [])
                want = 1 if needed(s) else 0
                if len(at) != want:
                    why = ("it sends/receives for a neighbour that does not exist"
                           if not want else "each chunk crosses each stage boundary once")
                    fail(f"stage {s} has {len(at)} x {s}{comm.value}{c}, expected {want} "
                         f"({why})", [acts[i] for i in at] or
                         [acts[index[s][(comp, c)][0]]])
                if not at:
                    continue
                comp_at = index[s][(comp, c)][0]
                if before and at[0] > comp_at:
                    fail(f"{acts[comp_at]} comes before {acts[at[0]]} on stage {s}: the "
                         f"compute needs the received data", [acts[comp_at]])
                if not before and at[0] < comp_at:
                    fail(f"{acts[at[0]]} comes before {acts[comp_at]} on stage {s}: it "
                         f"sends what that compute produces", [acts[at[0]]])


# --------------------------------------------------------------------------- simulation


class TimelineEntry(NamedTuple):
    """One executed action in a simulation.

    ``start``/``end`` are in cost units. Communication actions take no stage time: a send
    is posted at ``start == end``; a receive is shown when the data arrived (the wait
    before it is idle time, not busy time).
    """

    stage: int
    action: Action
    start: float
    end: float


@dataclass(frozen=True)
class SimResult:
    """What :func:`simulate` measured.

    Attributes:
        steps (int): Time slots used: distinct start times of compute actions that take
            time (equals ``makespan`` for unit costs and free communication, as long as
            some stage computes at every step).
        makespan: Time from the epoch's start to the end of its last action.
        busy (list): Per stage, the time spent in compute actions.
        idle (list): Per stage, ``makespan - busy``. Epoch after epoch, a stage's idle tail
            at the end of one epoch is the wait at the start of the next, so this is the
            stage's share of the pipeline bubble.
        wait (list): Per stage, idle time before its last action ends (time it waited with
            work still to come in the epoch; the runtime's ``bubble_s``).
        bubble_fraction: ``sum(idle) / (S * makespan)``; a :class:`fractions.Fraction`
            when all costs are rational (ints or Fractions), else a float.
        timeline (list[TimelineEntry]): Every action in execution order per stage.
    """

    steps: int
    makespan: float
    busy: list
    idle: list
    wait: list
    bubble_fraction: float
    timeline: list

    def grid(self, mark=None, comm: bool = True) -> str:
        """The timeline as text; see :func:`render_grid`."""
        return render_grid(self.timeline, mark=mark, comm=comm)


def _cost_fn(cost: Cost, name: str) -> Callable[[Action], float]:
    if callable(cost):
        return cost
    if not isinstance(cost, (int, float, Fraction)) or isinstance(cost, bool) or cost < 0:
        raise ScheduleError(f"{name}: expected a number >= 0 or a function of the action, "
                            f"got {cost!r}")
    return lambda _action: cost


def simulate(
    lowered_schedule: Mapping[int, Sequence[Action]],
    S: int,
    compute_time: Cost = 1,
    comm_time: Cost = 0,
    opt_time: Cost = 0,
) -> SimResult:
    """Replay a lowered schedule as a discrete-event simulation.

    Each stage executes its list in order, one action at a time. ``F`` and ``B``
    take ``compute_time`` and ``OPT`` takes ``opt_time`` (numbers, or functions of the
    action for per-stage or per-kind costs). ``SEND`` is non-blocking: it takes no stage
    time and the message occupies the link from sender to receiver for ``comm_time``
    (messages on one link go in posting order). ``RECV`` blocks until its message has
    arrived. A compute-only schedule with ``S > 1`` is lowered first.

    Args:
        lowered_schedule (Mapping[int, Sequence[Action]]): Actions per stage.
        S (int): Number of stages.
        compute_time: Cost of ``F``/``B`` (default 1).
        comm_time: Transfer time of one message, charged per ``SEND`` (default 0).
        opt_time: Cost of ``OPT`` (default 0, so it does not change the step count).

    Returns:
        SimResult: Makespan, per-stage busy/idle/wait, bubble fraction, timeline.

    Raises:
        ScheduleError: On deadlock (no stage can progress while actions remain; the
            message lists each stuck action and what it waits for, and shows the grid with
            them marked), or when a message is sent but never received.
    """
    _check_size("stages", S)
    _check_stage_keys(lowered_schedule, S)
    if S > 1 and not any(a.kind.is_comm for s in range(S) for a in lowered_schedule[s]):
        lowered_schedule = lower(lowered_schedule, S)
    compute_cost = _cost_fn(compute_time, "compute_time")
    comm_cost = _cost_fn(comm_time, "comm_time")
    opt_cost = _cost_fn(opt_time, "opt_time")

    acts = [list(lowered_schedule[s]) for s in range(S)]
    ptr = [0] * S
    free = [0] * S  # when each stage can start its next action
    busy = [0] * S
    link_free: dict[tuple[int, int], float] = {}
    # In-flight messages by (direction, sender, receiver, chunk): arrival times, FIFO.
    mailbox: dict[tuple[str, int, int, int], deque] = {}
    timeline: list[TimelineEntry] = []

    progressed = True
    while progressed:
        progressed = False
        for s in range(S):
            while ptr[s] < len(acts[s]):
                a = acts[s][ptr[s]]
                if a.kind in (ActionKind.RECV_F, ActionKind.RECV_B):
                    key = (a.kind.value[-1], a.peer, s, a.chunk)
                    queue = mailbox.get(key)
                    if not queue:
                        break  # blocked: its message has not been sent yet
                    start = end = max(free[s], queue.popleft())
                elif a.kind in (ActionKind.SEND_F, ActionKind.SEND_B):
                    start = end = free[s]
                    link = (s, a.peer)
                    arrival = max(start, link_free.get(link, 0)) + comm_cost(a)
                    link_free[link] = arrival
                    key = (a.kind.value[-1], s, a.peer, a.chunk)
                    mailbox.setdefault(key, deque()).append(arrival)
                else:
                    cost = opt_cost(a) if a.kind is ActionKind.OPT else compute_cost(a)
                    start, end = free[s], free[s] + cost
                    busy[s] += cost
                free[s] = end
                timeline.append(TimelineEntry(s, a, start, end))
                ptr[s] += 1
                progressed = True

    if any(ptr[s] < len(acts[s]) for s in range(S)):
        raise ScheduleError(_deadlock_message(acts, ptr, S, lowered_schedule))
    leftovers = [k for k, q in mailbox.items() if q]
    if leftovers:
        direction, src, dst, chunk = leftovers[0]
        sent = Action(src, ActionKind(f"SEND_{direction}"), chunk, dst)
        raise ScheduleError(
            f"schedule (S={S}) sends {sent} but stage {dst} never receives it "
            f"({len(leftovers)} unreceived message(s))\n"
            + render_grid(lowered_schedule, mark=[sent])
        )

    makespan = max([e.end for e in timeline], default=0)
    idle = [makespan - b for b in busy]
    last_end = [max([e.end for e in timeline if e.stage == s], default=0) for s in range(S)]
    wait = [last_end[s] - busy[s] for s in range(S)]
    total = S * makespan
    rational = all(isinstance(x, Rational) for x in (makespan, *busy))
    if total == 0:
        bubble = Fraction(0) if rational else 0.0
    elif rational:
        bubble = Fraction(sum(idle)) / Fraction(total)
    else:
        bubble = float(sum(idle)) / float(total)
    steps = len({e.start for e in timeline if e.action.kind.is_compute
                 and e.end > e.start})
    return SimResult(steps, makespan, busy, idle, wait, bubble, timeline)


def _deadlock_message(acts, ptr, S, schedule) -> str:
    stuck: list[Action] = []
    lines = []
    for s in range(S):
        if ptr[s] >= len(acts[s]):
            continue
        a = acts[s][ptr[s]]
        stuck.append(a)
        send_kind = ActionKind.SEND_F if a.kind is ActionKind.RECV_F else ActionKind.SEND_B
        wanted = Action(a.peer, send_kind, a.chunk, s)
        peer_list = acts[a.peer] if 0 <= a.peer < S else []
        if wanted not in peer_list:
            why = f"which stage {a.peer}'s list never contains"
        else:
            blocker = acts[a.peer][ptr[a.peer]] if ptr[a.peer] < len(acts[a.peer]) else None
            why = f"which stage {a.peer} has not reached: it is blocked at {blocker}"
        lines.append(f"  {a} waits for {wanted}, {why}")
    return (f"deadlock (S={S}): no stage can progress while {len(stuck)} stage(s) have "
            f"actions left; stuck actions:\n" + "\n".join(lines) + "\n"
            + render_grid(schedule, mark=stuck))


# --------------------------------------------------------------------------- printing


def render_grid(
    schedule_or_timeline: Union[Mapping[int, Sequence[Action]], SimResult, Sequence[TimelineEntry]],
    mark: Union[None, int, Action, Iterable[Action]] = None,
    comm: bool = True,
) -> str:
    """Print a schedule or a simulated timeline as a time-step x stage grid.

    For a schedule (``{stage: [actions]}``) row ``i`` holds each stage's ``i``-th action
    (program order). For a timeline (a :class:`SimResult` or its ``timeline``) each row is
    one start time, labelled with it; a cell lists the actions the stage starts then, and
    ``...`` marks a stage still busy with an action started on an earlier row.

    Args:
        schedule_or_timeline: What to print.
        mark: A row number, an :class:`Action`, or several actions; marked cells are
            prefixed ``>>`` and their rows end with ``<==``.
        comm (bool): Show communication actions (``False``: compute only).

    Returns:
        str: The grid, one line per row plus a header.
    """
    marked_row = mark if isinstance(mark, int) and not isinstance(mark, bool) else None
    if isinstance(mark, Action):
        marked = {mark}
    elif marked_row is None and mark is not None:
        marked = set(mark)
    else:
        marked = set()

    def cell_text(actions: Iterable[Action]) -> str:
        return " ".join((">>" if a in marked else "") + str(a) for a in actions)

    if isinstance(schedule_or_timeline, SimResult):
        schedule_or_timeline = schedule_or_timeline.timeline
    rows: list[tuple[str, list[str], bool]] = []
    if isinstance(schedule_or_timeline, Mapping):
        stages = sorted(schedule_or_timeline)
        lists = {s: [a for a in schedule_or_timeline[s] if comm or a.kind.is_compute]
                 for s in stages}
        for i in range(max((len(v) for v in lists.values()), default=0)):
            cells = [lists[s][i] if i < len(lists[s]) else None for s in stages]
            texts = [cell_text([c]) if c is not None else "" for c in cells]
            hit = i == marked_row or any(c in marked for c in cells if c is not None)
            rows.append((str(i), texts, hit))
        corner = "step"
    else:
        entries = [e for e in schedule_or_timeline if comm or e.action.kind.is_compute]
        stages = sorted({e.stage for e in entries})
        times = sorted({e.start for e in entries})
        # Group once (a stage's entries are in execution order, so starts never decrease);
        # the grid of a long epoch has thousands of entries.
        cells: dict[tuple[int, float], list[Action]] = {}
        busy_until: dict[tuple[int, float], float] = {}
        for e in entries:
            cells.setdefault((e.stage, e.start), []).append(e.action)
            busy_until[(e.stage, e.start)] = max(busy_until.get((e.stage, e.start), e.end), e.end)
        running_end = {s: None for s in stages}
        for i, t in enumerate(times):
            texts, hit = [], i == marked_row
            for s in stages:
                here = cells.get((s, t), [])
                end = running_end[s]
                running = end is not None and t < end
                texts.append(cell_text(here) if here else ("..." if running else ""))
                if here:
                    running_end[s] = busy_until[(s, t)]
                hit = hit or any(a in marked for a in here)
            rows.append((_fmt_time(t), texts, hit))
        corner = "time"
    header = [f"stage {s}" for s in stages]
    widths = [max([len(h)] + [len(r[1][j]) for r in rows]) for j, h in enumerate(header)]
    label_w = max([len(corner)] + [len(r[0]) for r in rows])
    lines = [" | ".join([corner.rjust(label_w)] + [h.ljust(w) for h, w in zip(header, widths)])]
    lines.append("-+-".join(["-" * label_w] + ["-" * w for w in widths]))
    for label, texts, hit in rows:
        line = " | ".join([label.rjust(label_w)] + [t.ljust(w) for t, w in zip(texts, widths)])
        lines.append(line.rstrip() + ("  <==" if hit else ""))
    return "\n".join(lines)


def _fmt_time(t) -> str:
    if isinstance(t, Fraction) and t.denominator != 1:
        return f"{float(t):g}"
    return f"{t:g}" if isinstance(t, float) else str(t)
