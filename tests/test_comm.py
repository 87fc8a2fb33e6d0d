"""Communicators on real processes: Gloo (torch) and MPI at world sizes 1, 2 and 4.

Each multi-process run executes one rank function that exercises every operation and
returns what it received plus its byte counters; the checks below compare them with what
the peers sent and with the byte definition in ``gnnpipe.comm``'s docstring, computed here
from the message sizes (not from the implementation). One run per (backend, world size)
is shared by several tests to keep the file fast on two cores.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest
import torch

from gnnpipe import GnnpipeError
from gnnpipe.comm import (
    CommStats,
    CommTimeoutError,
    CommUsageError,
    LaunchInfo,
    PeerFailedError,
    SingleProcessCommunicator,
    detect_launch,
    init_communicator,
    threads_per_rank,
)
from gnnpipe.spawn import run_ranks, spawn_ranks

HERE = Path(__file__).resolve().parent
# The children import this file as a module; they find it through PYTHONPATH.
CHILD_ENV = {"PYTHONPATH": os.pathsep.join([str(HERE)] + sys.path)}
D = 5  # row width of the all_to_all payloads


def _fn(name: str) -> str:
    return f"{__name__}:{name}"


# --------------------------------------------------------------------------- payloads


def a2a_rows(i: int, j: int) -> int:
    """Rows rank i sends to rank j; zero for some pairs at every world size >= 2."""
    return (i + 3 * j + 1) % 4


def a2a_payload(i: int, j: int) -> torch.Tensor:
    """Rank i's rows for rank j; every value says where it came from."""
    n = a2a_rows(i, j)
    rows = torch.arange(n, dtype=torch.float32)[:, None]
    cols = torch.arange(D, dtype=torch.float32)[None, :]
    return 1000.0 * i + 100.0 * j + 10.0 * rows + cols


def a2a_ids(i: int, j: int) -> torch.Tensor:
    return torch.arange(a2a_rows(i, j), dtype=torch.int64) + 10_000 * i + 100 * j


def ring_payload(r: int) -> torch.Tensor:
    return torch.arange(12, dtype=torch.float32).reshape(3, 4) + 100.0 * r


def _any_group_order() -> bool:
    """Whether this torch's new_group keeps a group's ranks in the caller's order (2.13 does;
    older releases sort them, and the torch communicator then refuses unsorted groups: see
    test_new_group_keeps_the_callers_rank_order_or_refuses_where_torch_cannot)."""
    import inspect

    import torch.distributed as dist

    return "sort_ranks" in inspect.signature(dist.new_group).parameters


#: A group of ranks 2 and 0 in that order (numbering must follow it where torch can).
SUB2 = [2, 0]


def groups_for(world: int) -> list[list[int]]:
    # Listed out of rank order where the torch in use can keep that order: numbering inside
    # a group must follow the list.
    if not _any_group_order():
        return [[0, 1], [2, 3]] if world == 4 else [[0, 1]] if world == 2 else [[0]]
    return [[1, 0], [3, 2]] if world == 4 else [[1, 0]] if world == 2 else [[0]]


# --------------------------------------------------------------------------- rank functions


def suite(comm) -> dict:
    """Every operation once, on any world size; returns what this rank saw."""
    r, w = comm.rank, comm.world_size
    nxt, prv = (r + 1) % w, (r - 1) % w
    out: dict = {"rank": r, "world_size": w}

    # Blocking send/recv around a ring; parity ordering so blocking calls cannot deadlock.
    got = torch.empty(3, 4)
    if r % 2 == 0:
        comm.send(ring_payload(r), nxt, tag=5, category="pipe_act")
        comm.recv(got, prv, tag=5, category="pipe_act")
    else:
        comm.recv(got, prv, tag=5, category="pipe_act")
        comm.send(ring_payload(r), nxt, tag=5, category="pipe_act")
    out["ring"] = got

    # Non-blocking both ways at once, into a non-contiguous buffer (staged and copied back).
    base = torch.zeros(6, 2, dtype=torch.float64)
    rw = comm.irecv(base.t(), prv, tag=9, category="pipe_grad")
    sw = comm.isend(torch.full((2, 6), float(r), dtype=torch.float64), nxt, tag=9,
                    category="pipe_grad")
    busy = torch.randn(64, 64) @ torch.randn(64, 64)  # compute while messages travel
    sw.wait()
    rw.wait()
    out["overlap"] = base.t().clone()
    out["overlap_done"] = rw.is_completed() and sw.is_completed() and busy.numel() > 0

    # all_to_all: separate tensors (each travels alone) ...
    send = [a2a_payload(r, j) for j in range(w)]
    recv = [torch.full((a2a_rows(j, r), D), -1.0) for j in range(w)]
    comm.all_to_all(send, recv, category="halo_fwd")
    out["a2a"] = recv
    # ... pieces of one buffer (MPI hands the buffer to Alltoallv) ...
    sizes_out = [a2a_rows(r, j) for j in range(w)]
    sizes_in = [a2a_rows(j, r) for j in range(w)]
    sbuf = torch.cat(send)
    rbuf = torch.full((sum(sizes_in), D), -1.0)
    comm.all_to_all(list(sbuf.split(sizes_out)), list(rbuf.split(sizes_in)),
                    category="halo_bwd")
    out["a2a_packed"] = list(rbuf.split(sizes_in))
    # ... and 1-D int64.
    recv_ids = [torch.full((a2a_rows(j, r),), -1, dtype=torch.int64) for j in range(w)]
    comm.all_to_all([a2a_ids(r, j) for j in range(w)], recv_ids, category="ids")
    out["a2a_ids"] = recv_ids
    # Streamed: each message made just before it is sent, each arrival handled in rank order.
    made, seen = [], []
    recv_st = [torch.full((a2a_rows(j, r), D), -1.0) for j in range(w)]

    def produce(j: int) -> torch.Tensor:
        made.append(j)
        return a2a_payload(r, j)

    def consume(j: int) -> None:
        seen.append((j, recv_st[j].clone()))  # complete when handed over

    comm.all_to_all_streamed(produce, recv_st, consume, category="stream")
    out["a2a_streamed"] = (made, seen)

    s = torch.tensor([r + 1.0, 2.0 * (r + 1)])
    comm.all_reduce(s)
    m = torch.tensor([r, -r, 7], dtype=torch.int64)
    comm.all_reduce(m, op="max")
    a = torch.full((4,), float(r), dtype=torch.float64)
    comm.all_reduce(a, op="avg")
    out["allreduce"] = (s, m, a)

    src = w - 1
    b = torch.full((5,), 7.0) if r == src else torch.zeros(5)
    comm.broadcast(b, src=src)
    bi = torch.tensor([r, 42]) if r == src else torch.zeros(2, dtype=torch.int64)
    comm.broadcast(bi, src=src)
    out["broadcast"] = (b, bi)
    comm.barrier()
    out["stats_before_split"] = comm.stats.snapshot()

    sub = comm.split_groups(groups_for(w))
    out["sub"] = (sub.rank, sub.world_size, sub.global_ranks)
    t = torch.tensor([float(r)], dtype=torch.float64)
    sub.all_reduce(t, category="group")
    bc = torch.tensor([10.0 * r])
    sub.broadcast(bc, src=0, category="group")
    got = None
    if sub.world_size == 2:
        if sub.rank == 0:
            sub.send(torch.tensor([float(r), float(r)]), 1, category="group")
        else:
            got = sub.recv(torch.empty(2), 0, category="group")
    sub.barrier()
    out["sub_values"] = (t, bc, got)
    if w == 4:  # ranks in no group get None
        other = comm.split(SUB2 if _any_group_order() else sorted(SUB2))
        out["sub2"] = None if other is None else (other.rank, other.global_ranks)
        if other is not None:
            x = torch.tensor([r + 1])
            other.all_reduce(x, op="prod", category="group2")
            out["sub2"] += (x,)
            other.close()
    sub.close()
    out["stats"] = comm.stats.snapshot()
    comm.barrier()
    return out


def never_answers(comm, done_file: str) -> dict | None:
    """Rank 0 waits for messages and a collective that rank 1 never joins.

    Gloo closes a communicator's connections after a timeout, so each operation gets a
    fresh sub-communicator (made while everyone is still answering).
    """
    subs = [comm.split_groups([[0, 1]]) for _ in range(3)]
    if comm.rank != 0:
        # Stay alive (a dead peer is another test) until rank 0 has seen every timeout.
        while not Path(done_file).exists():
            time.sleep(0.05)
        return None
    res = {}
    for sub, (name, call) in zip(subs, [
        ("recv", lambda c: c.recv(torch.empty(4), 1, tag=7, category="pipe_act")),
        ("irecv", lambda c: c.irecv(torch.empty(4), 1, tag=8, category="halo_bwd").wait()),
        ("all_reduce", lambda c: c.all_reduce(torch.ones(3))),
    ]):
        t0 = time.perf_counter()
        try:
            call(sub)
            res[name] = ("no error", "", time.perf_counter() - t0)
        except Exception as e:  # noqa: BLE001 — the test inspects whatever came out
            res[name] = (type(e).__name__, str(e), time.perf_counter() - t0)
    Path(done_file).write_text("done")
    return res


def victim(comm, run_dir: str) -> None:
    """Rank 1 announces itself and sleeps (to be SIGKILLed); rank 0 waits on it."""
    comm.barrier()
    if comm.rank == 1:
        Path(run_dir, "ready").write_text("1")
        time.sleep(120)
    else:
        comm.recv(torch.empty(8), 1, tag=3, category="pipe_act")


def sleeps_forever(comm) -> None:
    comm.barrier()
    time.sleep(600)


def launch_report(comm) -> tuple:
    t = torch.tensor([comm.rank + 1.0])
    comm.all_reduce(t)
    return comm.kind, comm.rank, comm.world_size, detect_launch().launcher, t.item()


def fails_on_rank1(comm) -> int:
    if comm.rank == 1:
        raise ValueError("boom from rank 1")
    return comm.rank


# --------------------------------------------------------------------------- checks


def expected_bytes(r: int, w: int) -> dict[str, int]:
    """The documented definition, from the message sizes the suite uses."""
    if w == 1:
        return {}
    a2a_rows_out = sum(a2a_rows(r, j) for j in range(w) if j != r)
    exp = {
        "pipe_act": 3 * 4 * 4,  # one [3, 4] float32 send
        "pipe_grad": 2 * 6 * 8,  # one [2, 6] float64 isend
        "halo_fwd": a2a_rows_out * D * 4,
        "halo_bwd": a2a_rows_out * D * 4,
        "ids": a2a_rows_out * 8,
        "stream": a2a_rows_out * D * 4,
        "allreduce": 2 * 4 + 3 * 8 + 4 * 8,  # every rank counts each reduced tensor
        "control": (5 * 4 + 2 * 8) if r == w - 1 else 0,  # broadcasts count on the source
    }
    return {k: v for k, v in exp.items()}


def check_suite(results: list[dict], w: int) -> None:
    assert [res["rank"] for res in results] == list(range(w))
    for r, res in enumerate(results):
        prv = (r - 1) % w
        assert torch.equal(res["ring"], ring_payload(prv))
        assert torch.equal(res["overlap"], torch.full((2, 6), float(prv), dtype=torch.float64))
        assert res["overlap_done"]
        for key in ("a2a", "a2a_packed"):
            for j in range(w):
                assert torch.equal(res[key][j], a2a_payload(j, r)), (key, r, j)
        for j in range(w):
            assert torch.equal(res["a2a_ids"][j], a2a_ids(j, r))
        made, seen = res["a2a_streamed"]
        assert made == [(r + i) % w for i in range(1, w)] + [r]  # every rank starts elsewhere
        assert [j for j, _ in seen] == list(range(w))  # handled in rank order
        for j, got in seen:
            assert torch.equal(got, a2a_payload(j, r)), ("streamed", r, j)
        s, m, a = res["allreduce"]
        total = w * (w + 1) / 2
        assert torch.equal(s, torch.tensor([total, 2 * total]))
        assert torch.equal(m, torch.tensor([w - 1, 0, 7]))
        assert torch.allclose(a, torch.full((4,), (w - 1) / 2, dtype=torch.float64))
        b, bi = res["broadcast"]
        assert torch.equal(b, torch.full((5,), 7.0))
        assert torch.equal(bi, torch.tensor([w - 1, 42]))

        # Byte accounting: exactly the definition (zero-byte categories may be absent).
        before = res["stats_before_split"]
        sent = {k: v for k, v in before["bytes_sent"].items() if v}
        assert sent == {k: v for k, v in expected_bytes(r, w).items() if v}, (r, sent)
        assert before["total_bytes_sent"] == sum(expected_bytes(r, w).values())
        if w > 1:
            rows_in = sum(a2a_rows(j, r) for j in range(w) if j != r)
            assert before["bytes_recv"]["halo_fwd"] == rows_in * D * 4
            assert before["bytes_recv"]["pipe_act"] == 48
        assert before["wait_s"] > 0
        assert before["wait_s"] == pytest.approx(sum(before["wait_s_by_category"].values()))
        assert before["calls"]["halo_fwd"] == 1 and before["calls"]["allreduce"] == 3
        assert before["calls"]["stream"] == 1  # one exchange, however many messages
        if w > 1:
            assert before["bytes_recv"]["stream"] == rows_in * D * 4

        # Sub-communicators: numbering follows the list, values stay inside the group.
        group = next(g for g in groups_for(w) if r in g)
        assert res["sub"] == (group.index(r), len(group), group)
        t, bc, got = res["sub_values"]
        assert t.item() == sum(group)
        assert bc.item() == 10.0 * group[0]
        if len(group) == 2 and group.index(r) == 1:
            assert torch.equal(got, torch.tensor([float(group[0])] * 2))
        # ... and their bytes land in the parent's one total per rank.
        group_bytes = 8 if len(group) > 1 else 0  # the [1] float64 all-reduce
        group_bytes += 4 * (group.index(r) == 0) if len(group) > 1 else 0  # bcast source
        group_bytes += 8 * (group.index(r) == 0) if len(group) == 2 else 0  # the send
        assert res["stats"]["bytes_sent"].get("group", 0) == group_bytes
        if w == 4:
            if r in (0, 2):
                sub_rank, gr, x = res["sub2"]
                order = SUB2 if _any_group_order() else sorted(SUB2)
                assert (sub_rank, gr) == (order.index(r), order)
                assert x.item() == 3  # (0 + 1) * (2 + 1)
            else:
                assert res["sub2"] is None


_CACHE: dict = {}


def suite_results(comm: str, w: int) -> list[dict]:
    if (comm, w) not in _CACHE:
        _CACHE[comm, w] = run_ranks(_fn("suite"), w, comm, timeout_s=90, env=CHILD_ENV,
                                    comm_timeout_s=30)
    return _CACHE[comm, w]


# --------------------------------------------------------------------------- tests: ranks


@pytest.mark.parametrize("w", [2, 4])
def test_torch_gloo_suite(w):
    check_suite(suite_results("torch", w), w)


@pytest.mark.mpi
@pytest.mark.parametrize("w", [2, 4])
def test_mpi_suite(w):
    check_suite(suite_results("mpi", w), w)


def test_single_process_suite():
    comm = init_communicator("single", env={})
    assert isinstance(comm, SingleProcessCommunicator)
    check_suite([suite(comm)], 1)
    assert comm.stats.total_bytes_sent == 0  # nothing leaves a one-rank world


def test_torch_world_of_one_in_process():
    # A torch communicator with one rank needs no rendezvous (in-memory store).
    comm = init_communicator("torch", timeout_s=10, env={})
    try:
        check_suite([suite(comm)], 1)
    finally:
        comm.close()


@pytest.mark.parametrize("comm", ["torch", pytest.param("mpi", marks=pytest.mark.mpi)])
def test_peer_that_never_answers_times_out(comm, tmp_path):
    timeout = 1.0
    res = run_ranks(_fn("never_answers"), 2, comm, args={"done_file": str(tmp_path / "done")},
                    timeout_s=60, env=CHILD_ENV, comm_timeout_s=timeout)[0]
    for op, what in [("recv", "recv from rank 1 (pipe_act, tag 7)"),
                     ("irecv", "recv from rank 1 (halo_bwd, tag 8)"),
                     ("all_reduce", "all_reduce (allreduce)")]:
        kind, msg, elapsed = res[op]
        assert kind == "CommTimeoutError", (op, kind, msg)
        assert msg.startswith("rank 0: ") and what in msg and "rank 1" in msg, msg
        assert f"{timeout:.1f} s" in msg
        # the failure census may add up to its hard 4 s limit on a loaded machine
        assert timeout * 0.9 <= elapsed <= timeout + 5.0, (op, elapsed)


def test_sigkilled_peer_is_named_gloo(tmp_path):
    with spawn_ranks(_fn("victim"), 2, "torch", args={"run_dir": str(tmp_path)},
                     env=CHILD_ENV, comm_timeout_s=20, run_dir=tmp_path) as ranks:
        ranks.wait_file("ready", timeout_s=60)
        time.sleep(0.3)  # let rank 0 enter its recv
        t0 = time.monotonic()
        ranks.kill_rank(1)
        codes = ranks.wait(timeout_s=25)
        elapsed = time.monotonic() - t0
        err = ranks.stderr(0)
        assert codes[0] not in (None, 0), ranks.report(codes)
        assert codes[1] == -signal.SIGKILL
        assert elapsed < 20, elapsed
        # The closed connection names the peer long before the 20 s timeout.
        assert "PeerFailedError" in err or "CommTimeoutError" in err, err
        assert "recv from rank 1 (pipe_act, tag 3)" in err and "rank 1" in err, err


@pytest.mark.mpi
def test_sigkilled_peer_mpi_does_not_hang(tmp_path):
    # Hydra kills the whole job when one rank dies: all that must hold is no hang and a
    # non-zero exit that says which rank went.
    with spawn_ranks(_fn("victim"), 2, "mpi", args={"run_dir": str(tmp_path)},
                     env=CHILD_ENV, comm_timeout_s=20, run_dir=tmp_path) as ranks:
        ranks.wait_file("ready", timeout_s=60)
        pid0, pid1 = ranks.pid(0), ranks.pid(1)
        t0 = time.monotonic()
        ranks.kill_rank(1)
        codes = ranks.wait(timeout_s=25)
        assert codes[0] not in (None, 0), ranks.report(codes)
        assert time.monotonic() - t0 < 20
        with pytest.raises(ProcessLookupError):
            for _ in range(100):  # rank 0 must be gone too (reaped by its proxy)
                os.kill(pid0, 0)
                time.sleep(0.05)
        # Hydra names a dead process of the job by pid (ours wrote rank -> pid) and the
        # signal. Usually that is rank 1; once, in a fresh-clone CI run under load
        # (2026-12-02), the report did not name rank 1's pid (the assertion's output cut off
        # which pid it named; rank 0 is also killed by Hydra once rank 1 dies), so either of
        # the job's pids is accepted.
        err = ranks.stderr()
        assert any(f"PID {p} " in err for p in (pid0, pid1)) and "signal 9" in err, err


@pytest.mark.slow  # ~4 s; the launch path every mpirun + --comm torch run takes
@pytest.mark.mpi
def test_torch_under_mpirun_meets_through_a_file():
    res = run_ranks(_fn("launch_report"), 2, "torch", launcher="mpirun", timeout_s=60,
                    env=CHILD_ENV, comm_timeout_s=20)
    assert res == [("torch", 0, 2, "mpich", 3.0), ("torch", 1, 2, "mpich", 3.0)]


@pytest.mark.slow  # ~5 s
@pytest.mark.mpi
def test_timeout_kills_every_process_of_the_run(tmp_path):
    import psutil

    with spawn_ranks(_fn("sleeps_forever"), 2, "mpi", env=CHILD_ENV, run_dir=tmp_path) as ranks:
        pids = [ranks.pid(k) for k in range(2)]
        tree = psutil.Process(ranks.procs[0].pid).children(recursive=True)
        assert set(pids) <= {p.pid for p in tree}
        assert None in ranks.wait(timeout_s=1.0)  # still sleeping: the run hangs
        ranks.kill()
        time.sleep(0.2)
        alive = [p for p in tree if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        assert not alive, alive
        assert ranks.procs[0].returncode is not None


def test_run_ranks_reports_every_rank_on_failure():
    with pytest.raises(AssertionError) as info:
        run_ranks(_fn("fails_on_rank1"), 2, "torch", timeout_s=60, env=CHILD_ENV,
                  comm_timeout_s=10)
    msg = str(info.value)
    assert "boom from rank 1" in msg and "rank 1: exit code 1" in msg
    assert "rank 0: exit code" in msg


# --------------------------------------------------------------------------- tests: local


def test_usage_errors_name_rank_and_values():
    comm = SingleProcessCommunicator()
    with pytest.raises(CommUsageError, match=r"rank 0: isend: peer 3 outside .*\[0, 1\)"):
        comm.isend(torch.zeros(1), 3)
    with pytest.raises(CommUsageError, match="tag -1"):
        comm.send(torch.zeros(1), 0, tag=-1)
    with pytest.raises(CommUsageError, match="expected 1 send and recv tensors, got 2 and 1"):
        comm.all_to_all([torch.zeros(1), torch.zeros(1)], [torch.zeros(1)])
    with pytest.raises(CommUsageError, match="op 'mean'"):
        comm.all_reduce(torch.zeros(1), op="mean")
    with pytest.raises(CommUsageError, match="rank 0 is in group 0 and group 1"):
        comm.split_groups([[0], [0]])
    with pytest.raises(CommTimeoutError, match="nothing was sent"):
        comm.recv(torch.zeros(1), 0, tag=4)
    with pytest.raises(CommUsageError, match="kind must be"):
        init_communicator("nccl", env={})
    with pytest.raises(GnnpipeError, match="2 ranks"):
        init_communicator("single", env={"RANK": "0", "WORLD_SIZE": "2"})
    with pytest.raises(GnnpipeError, match="needs a rendezvous"):
        init_communicator("torch", env={"PMI_RANK": "0", "PMI_SIZE": "2"})


def test_stats_reset_and_snapshot_is_a_copy():
    stats = CommStats()
    stats.bytes_sent["halo_fwd"] += 10
    stats.wait_s_by_category["halo_fwd"] += 0.5
    snap = stats.snapshot()
    stats.reset()
    assert snap["bytes_sent"] == {"halo_fwd": 10} and snap["wait_s"] == 0.5
    assert stats.snapshot()["total_bytes_sent"] == 0 and stats.wait_s == 0


@pytest.mark.parametrize("env, expected", [
    ({}, LaunchInfo(0, 1, 0, 1, "single")),
    ({"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"},
     LaunchInfo(3, 8, 1, 2, "torchrun")),
    ({"PMI_RANK": "2", "PMI_SIZE": "4", "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "2"},
     LaunchInfo(2, 4, 0, 2, "mpich")),
    ({"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "6",
      "OMPI_COMM_WORLD_LOCAL_RANK": "2", "OMPI_COMM_WORLD_LOCAL_SIZE": "3"},
     LaunchInfo(5, 6, 2, 3, "openmpi")),
    ({"SLURM_PROCID": "4", "SLURM_NTASKS": "6", "SLURM_LOCALID": "1",
      "SLURM_NTASKS_PER_NODE": "3"}, LaunchInfo(4, 6, 1, 3, "slurm")),
    # Heterogeneous nodes: "2(x2),1" -> node 2 runs one task.
    ({"SLURM_PROCID": "4", "SLURM_STEP_NUM_TASKS": "5", "SLURM_NTASKS": "99",
      "SLURM_LOCALID": "0", "SLURM_TASKS_PER_NODE": "2(x2),1", "SLURM_NODEID": "2"},
     LaunchInfo(4, 5, 0, 1, "slurm")),
    # torchrun inside a Slurm allocation is torchrun.
    ({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
      "SLURM_PROCID": "0", "SLURM_NTASKS": "1"}, LaunchInfo(1, 2, 1, 2, "torchrun")),
    # No local information: assume every rank shares this host.
    ({"PMI_RANK": "1", "PMI_SIZE": "3"}, LaunchInfo(1, 3, 1, 3, "mpich")),
])
def test_detect_launch(env, expected):
    assert detect_launch(env) == expected


@pytest.mark.parametrize("env, match", [
    ({"RANK": "x", "WORLD_SIZE": "2"}, r"RANK='x' \(set by torchrun\) is not an integer"),
    ({"PMI_RANK": "4", "PMI_SIZE": "4"}, r"PMI_RANK=4 must lie in \[0, PMI_SIZE=4\)"),
])
def test_detect_launch_rejects_bad_env(env, match):
    with pytest.raises(GnnpipeError, match=match):
        detect_launch(env)


def test_threads_per_rank_divides_this_hosts_cores():
    cores = len(os.sched_getaffinity(0))
    assert threads_per_rank(LaunchInfo(0, 1, 0, 1, "single")) == cores
    assert threads_per_rank(LaunchInfo(0, 8, 0, 2, "mpich")) == max(1, cores // 2)
    assert threads_per_rank(LaunchInfo(0, 64, 0, 64, "slurm")) == 1


def test_packed_detects_views_of_one_buffer():
    from gnnpipe.comm.mpi_backend import _packed

    buf = torch.zeros(7, 3)
    pieces = list(buf.split([2, 0, 5]))
    base, counts, displs, total = _packed(pieces)
    assert (base, counts, displs, total) == (buf.data_ptr(), [24, 0, 60], [0, 24, 24], 84)
    assert _packed([buf[0:2], buf[3:7]]) is None  # a gap between the pieces
    assert _packed([torch.empty(0, 3), buf[2:7]])[1:] == ([0, 60], [0, 0], 60)
    assert _packed(list(reversed(pieces))) is None  # out of peer order
    assert _packed([buf[:, :2]]) is None  # not contiguous


def test_new_group_keeps_the_callers_rank_order_or_refuses_where_torch_cannot():
    """torch 2.11 (the GPU machine's) has no ``sort_ranks`` and numbers a group's ranks in
    ascending order: ascending groups go through unchanged, any other is refused by name
    before a process group is made (it would number ranks differently from gnnpipe)."""
    from gnnpipe.comm.torch_backend import new_group_order_kwargs

    assert new_group_order_kwargs([[2, 0], [1, 3]], has_sort_ranks=True) == {"sort_ranks": False}
    assert new_group_order_kwargs([[0, 1], [2, 3]], has_sort_ranks=False) == {}
    with pytest.raises(CommUsageError, match=r"group \[2, 0\] is not in ascending rank order"):
        new_group_order_kwargs([[1, 3], [2, 0]], has_sort_ranks=False)
