"""Checkpoints, resume and the NaN stop.

In one process (fast): the commit layout (COMMIT.json with each file's sha256, ``latest``,
only the newest two kept), a checkpoint without COMMIT.json is skipped, resumed runs equal
uninterrupted ones (graph mode and stale pipeline mode, history and snapshot included),
resuming with other settings or a damaged file is refused with the difference named, a
diverging run stops naming the epoch and keeps its last good checkpoint.

On real ranks (2 ranks): a run killed with SIGKILL after a checkpoint and resumed ends with
the same metrics.jsonl as an uninterrupted run, for graph mode (Gloo ranks started by the
test harness, calling ``train``) and for stale pipeline mode (``mpirun -np 2 gnnpipe-train``);
a NaN injected into stage 0 of a 2-stage pipeline is reported on stage 0 (not on the last
stage, where the loss is computed); a 2-rank checkpoint is refused by a 1-rank run; a hybrid 2 x 2 run (4 MPI ranks) stopped
after a checkpoint and resumed equals an uninterrupted one.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent

from gnnpipe import GnnpipeError  # noqa: E402
from gnnpipe import checkpoint as ckpt  # noqa: E402
from gnnpipe.comm import SingleProcessCommunicator  # noqa: E402
from gnnpipe.config import TrainConfig  # noqa: E402
from gnnpipe.spawn import spawn_ranks  # noqa: E402

SMALL = dict(synth_nodes=300, synth_degree=6.0, synth_classes=4, synth_features=12, hidden=16,
             seed=3, eval_every=2, progress=False, timeout=60.0)
GRAPH = dict(SMALL, mode="graph", model="gcn", layers=3)
# Stale pipeline: 8 chunks on 2 stages, history read, snapshot every 3 epochs (so the saved
# state holds a snapshot that differs from the live history).
PIPE = dict(SMALL, mode="pipeline", model="gcnii", layers=4, snapshot_period=3)
# Drift-bounded exact epochs: the bound sits among the drifts (0.79-0.84, each at least 0.01
# from it), so epochs 0, 2 and 7 run exact: the kind of epoch 6, after the checkpoint of
# epoch 5, is state the checkpoint carries.
PIPE_DRIFT = dict(PIPE, drift_bound=0.82)
# Metrics that must match exactly between runs (the rest are times and memory).
KEYS = ("loss", "train_acc", "val_acc", "test_acc")


def _cfg(**kw) -> TrainConfig:
    return TrainConfig(**kw)


def _train1(out: Path | None, **kw) -> dict:
    """One-process run through the real trainer."""
    from gnnpipe.train import train

    return train(_cfg(**kw), SingleProcessCommunicator(), out=out)


def _metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def _same_metrics(got: list[dict], want: list[dict], where: str) -> None:
    assert [r["epoch"] for r in got] == list(range(len(want))), f"{where}: epochs {[r['epoch'] for r in got]}"
    for g, w in zip(got, want):
        assert set(k for k in KEYS if k in g) == set(k for k in KEYS if k in w), f"{where} epoch {g['epoch']}"
        for k in KEYS:
            if k in w:
                np.testing.assert_allclose(g[k], w[k], rtol=1e-6, atol=1e-7,
                                           err_msg=f"{where}: {k} at epoch {g['epoch']}")


def _kept_from(before: list[dict], after: list[dict], epoch: int) -> None:
    """Epochs up to ``epoch`` come from the checkpoint, not from a rerun: their wall times
    (which no two runs share) are the interrupted run's."""
    assert len(before) > epoch
    for b, a in zip(before[: epoch + 1], after):
        assert a["epoch_time_s"] == b["epoch_time_s"], f"epoch {a['epoch']} was recomputed"
    assert any(a["epoch_time_s"] != b["epoch_time_s"] for b, a in zip(before[epoch + 1 :], after[epoch + 1 :])) or len(before) == epoch + 1


# ---------------------------------------------------------------------- one process
def test_commit_layout_keeps_newest_two_and_hashes_files(tmp_path):
    run = tmp_path / "run"
    _train1(run, **GRAPH, epochs=7, checkpoint_every=2)
    # epochs 1, 3, 5 were checkpointed; only the newest two survive
    assert [e for e, _ in ckpt.list_checkpoints(run, committed_only=False)] == [3, 5]
    assert (run / "checkpoints" / "latest").read_text().strip() == "epoch-5"
    d = run / "checkpoints" / "epoch-5"
    commit = json.loads((d / "COMMIT.json").read_text())
    assert commit["epoch"] == 5 and commit["world_size"] == 1
    data = (d / "rank0.pt").read_bytes()
    assert commit["files"]["rank0.pt"] == {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    assert not list(d.glob("*.tmp"))
    ident = commit["identity"]
    assert ident["model"] == "gcn" and ident["layers"] == 3 and ident["world_size"] == 1
    assert ident["parts"] == 1  # resolved from the world size, not the raw 0
    payload = torch.load(d / "rank0.pt", weights_only=True)
    assert payload["epoch"] == 5 and len(payload["history"]) == 6
    assert set(payload["rng"]) >= {"torch", "numpy_key"}
    assert payload["executor"]["kind"] == "graph"


@pytest.mark.parametrize("base", [GRAPH, PIPE, PIPE_DRIFT], ids=["graph", "pipeline-stale", "pipeline-drift-bound"])
def test_resume_equals_uninterrupted_one_process(tmp_path, base):
    ref = tmp_path / "ref"
    _train1(ref, **base, epochs=9)
    run = tmp_path / "run"
    _train1(run, **base, epochs=6, checkpoint_every=2)  # stops after epoch 5; epoch-5 committed
    before = _metrics(run)
    # A killed run leaves lines after its checkpoint, maybe a torn one: they must disappear.
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"epoch": 6, "loss": 123.0}\n{"epoch": 7, "lo')
    summary = _train1(run, **{**base, "eval_every": 2}, epochs=9, checkpoint_every=2, resume=str(run))
    _same_metrics(_metrics(run), _metrics(ref), f"{base['mode']} resumed from epoch 5")
    _kept_from(before, _metrics(run), 5)
    exact = [bool(r.get("exact")) for r in _metrics(ref)]
    assert [bool(r.get("exact")) for r in _metrics(run)] == exact
    if base.get("drift_bound"):
        assert exact == [True, False, True, False, False, False, False, True, False], exact
        np.testing.assert_allclose([r.get("drift", -1) for r in _metrics(run)],
                                   [r.get("drift", -1) for r in _metrics(ref)], rtol=1e-6)
    assert summary["epochs"] == 9
    assert json.loads((run / "config.json").read_text())["resumed_from"].endswith("epoch-5")
    ref_summary = json.loads((ref / "summary.json").read_text())
    got_summary = json.loads((run / "summary.json").read_text())
    for k in ("best_val_acc", "test_acc_at_best_val", "best_epoch", "final_loss", "epochs"):
        assert got_summary[k] == pytest.approx(ref_summary[k], rel=1e-6), k


def test_checkpoint_without_commit_is_skipped(tmp_path):
    run = tmp_path / "run"
    _train1(run, **GRAPH, epochs=4, checkpoint_every=2)  # epoch-1, epoch-3
    root = run / "checkpoints"
    # A crash while writing epoch-5: its rank file is there, COMMIT.json is not, and even
    # `latest` was (wrongly) advanced.
    (root / "epoch-5").mkdir()
    shutil.copy(root / "epoch-3" / "rank0.pt", root / "epoch-5" / "rank0.pt")
    (root / "latest").write_text("epoch-5\n")
    assert ckpt.find_checkpoint(run) == root / "epoch-3"
    assert ckpt.find_checkpoint(root) == root / "epoch-3"
    with pytest.raises(GnnpipeError, match="COMMIT.json") as e:
        ckpt.find_checkpoint(root / "epoch-5")
    assert "epoch-3" in str(e.value)  # points at the usable one
    # Resuming the run dir continues from epoch 3, and the next commit of epoch 5 replaces
    # the debris.
    _train1(run, **GRAPH, epochs=6, checkpoint_every=2, resume=str(run))
    assert [r["epoch"] for r in _metrics(run)] == list(range(6))
    assert ckpt.is_committed(root / "epoch-5")
    assert ckpt.find_checkpoint(run) == root / "epoch-5"


def test_no_checkpoint_at_all(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(GnnpipeError, match="no committed checkpoint"):
        ckpt.find_checkpoint(tmp_path / "empty")
    with pytest.raises(GnnpipeError, match="no such directory"):
        ckpt.find_checkpoint(tmp_path / "absent")


@pytest.mark.parametrize("change,named", [
    (dict(model="sage"), ["model: checkpoint 'gcn', this run 'sage'"]),
    (dict(layers=2), ["layers: checkpoint 3, this run 2"]),
    (dict(lr=0.02), ["lr: checkpoint 0.01, this run 0.02"]),
    (dict(mode="pipeline"), ["mode: checkpoint 'graph', this run 'pipeline'"]),
    # another dataset: its hash differs, and the setting that made it
    (dict(synth_nodes=320), ["dataset_hash: checkpoint '", "synth_nodes: checkpoint 300, this run 320"]),
    (dict(shuffle=False, seed=4), ["shuffle: checkpoint True, this run False", "seed: checkpoint 3, this run 4"]),
])
def test_resume_with_other_math_is_refused(tmp_path, change, named):
    run = tmp_path / "run"
    _train1(run, **GRAPH, lr=0.01, epochs=2, checkpoint_every=2)
    with pytest.raises(GnnpipeError) as e:
        _train1(tmp_path / "other", **{**GRAPH, "lr": 0.01, **change}, epochs=4, resume=str(run))
    msg = str(e.value)
    assert "cannot resume from" in msg and "epoch-1" in msg
    for text in named:
        assert text in msg, msg
    assert not (tmp_path / "other" / "metrics.jsonl").exists()


def test_resume_may_change_epochs_eval_and_checkpointing(tmp_path):
    run = tmp_path / "run"
    _train1(run, **GRAPH, epochs=2, checkpoint_every=2)
    s = _train1(tmp_path / "more", **{**GRAPH, "eval_every": 3}, epochs=5, checkpoint_every=1,
                resume=str(run / "checkpoints" / "epoch-1"))
    assert s["epochs"] == 5
    assert ckpt.find_checkpoint(tmp_path / "more").name == "epoch-4"


def test_cli_resume_takes_settings_from_the_checkpoint(tmp_path):
    from gnnpipe.cli.train import main

    ref = tmp_path / "ref"
    _train1(ref, **PIPE, epochs=8)
    run = tmp_path / "run"
    # one intra-op thread: the test machines' two cores are shared with other processes
    flags = _cli_args(dict(PIPE, epochs=4, checkpoint_every=2, out=str(run), threads=1))
    assert main(flags) == 0
    # no settings but --epochs: the rest (model, snapshot period, seed, ...) is the checkpoint's
    assert main(["--resume", str(run), "--epochs", "8", "--no-progress"]) == 0
    _same_metrics(_metrics(run), _metrics(ref), "gnnpipe-train --resume RUN --epochs 8")
    assert json.loads((run / "config.json").read_text())["snapshot_period"] == PIPE["snapshot_period"]
    # a math setting given on the command line still has to match
    assert main(["--resume", str(run), "--epochs", "9", "--layers", "3", "--no-progress"]) == 2
    assert main(["--resume", str(tmp_path / "absent"), "--no-progress"]) == 2


def test_cli_resume_of_a_checkpoint_older_than_a_field_keeps_what_it_meant(tmp_path):
    """A checkpoint written before --exact-every existed had no exact epochs; resuming it
    takes that (0), not today's default (2), and continues the run as it was."""
    from gnnpipe.cli.train import main

    run = tmp_path / "run"
    assert main(_cli_args(dict(PIPE, epochs=4, checkpoint_every=2, out=str(run), threads=1, exact_every=0))) == 0
    for d in (run / "checkpoints").glob("epoch-*"):  # as an older gnnpipe wrote it
        commit = json.loads((d / "COMMIT.json").read_text())
        del commit["config"]["exact_every"], commit["identity"]["exact_every"]
        (d / "COMMIT.json").write_text(json.dumps(commit))
    assert main(["--resume", str(run), "--epochs", "6", "--no-progress"]) == 0
    assert json.loads((run / "config.json").read_text())["exact_every"] == 0
    assert not any(m.get("exact") for m in _metrics(run))


def test_damaged_rank_file_is_refused(tmp_path):
    run = tmp_path / "run"
    _train1(run, **GRAPH, epochs=2, checkpoint_every=2)
    f = run / "checkpoints" / "epoch-1" / "rank0.pt"
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0xFF
    f.write_bytes(bytes(data))
    with pytest.raises(GnnpipeError, match="changed or damaged"):
        _train1(run, **GRAPH, epochs=4, resume=str(run))


def test_nan_stops_naming_epoch_and_keeps_last_good_checkpoint(tmp_path):
    # Adam moves every weight by about lr in the first step: with lr = 1e30 the next forward
    # multiplies weights of 1e30 through 3 layers and overflows fp32 (max 3.4e38).
    run = tmp_path / "run"
    from gnnpipe.train import NonFiniteLossError

    with pytest.raises(NonFiniteLossError) as e:
        _train1(run, **{**GRAPH, "lr": 1e30}, epochs=10, checkpoint_every=1)
    msg = str(e.value)
    assert "at epoch 1 " in msg and "mode graph" in msg
    assert "epoch-0" in msg  # the last good checkpoint is named
    assert [e for e, _ in ckpt.list_checkpoints(run, committed_only=False)] == [0]
    assert ckpt.find_checkpoint(run).name == "epoch-0"
    losses = [r["loss"] for r in _metrics(run)]
    assert len(losses) == 1 and math.isfinite(losses[0])  # the bad epoch is not recorded
    # and the good checkpoint is loadable as it is
    commit = ckpt.read_commit(run / "checkpoints" / "epoch-0")
    _, payload = ckpt.load_checkpoint(run / "checkpoints" / "epoch-0", 0, commit["identity"])
    assert all(torch.isfinite(v).all() for v in payload["executor"]["model"].values())


def test_nan_in_one_stage_pipeline_names_the_stage(tmp_path):
    from gnnpipe.train import NonFiniteLossError

    with pytest.raises(NonFiniteLossError, match=r"at epoch 1 .*stage 0 of 1 \(last\)"):
        _train1(tmp_path / "p", **{**PIPE, "lr": 1e30}, epochs=5)


# ---------------------------------------------------------------------- real ranks
def train_rank(comm, jobs: list[dict]) -> list[dict]:
    """Rank function: runs ``train`` for each job; returns summaries or error messages.

    A job is ``{"cfg": {...}, "out": str, "inject": (epoch, stage) or None}``; ``inject``
    fills that stage's weights with NaN just before that epoch (a test-only hook applied to
    this child process's trainer, so the NaN is born on a known stage).
    """
    import gnnpipe.train as T
    import gnnpipe.train.setup as setup

    results = []
    for job in jobs:
        build = setup.executor_for_config
        if job.get("epoch_sleep_s"):
            # A run that a test will kill: slow it down so that it cannot race many epochs
            # past the checkpoint the test waits for (tiny epochs take about 1 ms here).
            nap = job["epoch_sleep_s"]

            def build_slow(cfg, comm_, graph, user=None, _build=build):
                ex, plan = _build(cfg, comm_, graph, user)
                inner = ex.train_epoch

                def train_epoch(epoch):
                    time.sleep(nap)
                    return inner(epoch)

                ex.train_epoch = train_epoch
                return ex, plan

            setup.executor_for_config = build_slow
        if job.get("inject"):
            at_epoch, at_stage = job["inject"]

            def build_with_hook(cfg, comm_, graph, user=None, _build=build):
                ex, plan = _build(cfg, comm_, graph, user)
                inner = ex.train_epoch

                def train_epoch(epoch):
                    if epoch == at_epoch and ex.s == at_stage:
                        with torch.no_grad():
                            for p in ex.params:
                                p.fill_(float("nan"))
                    return inner(epoch)

                ex.train_epoch = train_epoch
                return ex, plan

            setup.executor_for_config = build_with_hook
        try:
            s = T.train(TrainConfig(**job["cfg"]), comm, out=Path(job["out"]))
            results.append({k: v for k, v in s.items() if k != "history"})
        except GnnpipeError as e:
            results.append({"error": str(e), "type": type(e).__name__})
        finally:
            setup.executor_for_config = build
    return results


def _cli_args(cfg: dict) -> list[str]:
    args = []
    for k, v in cfg.items():
        flag = "--" + k.replace("_", "-")
        if isinstance(v, bool):
            args.append(flag if v else "--no-" + k.replace("_", "-"))
        else:
            args += [flag, str(v)]
    return args


def _mpirun_train(cfg: dict, log: Path) -> subprocess.Popen:
    exe = Path(sys.executable).parent
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "PMI_RANK", "PMI_SIZE"):
        env.pop(k, None)
    with open(log, "wb") as f:
        return subprocess.Popen([str(exe / "mpirun"), "-np", "2", str(exe / "gnnpipe-train"), *_cli_args(cfg)],
                                stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def _kill_tree(p: subprocess.Popen) -> None:
    """SIGKILL mpirun and every process below it (hydra's proxy leaves mpirun's group)."""
    import psutil

    from gnnpipe.spawn import kill_process_tree

    victims = kill_process_tree([p])
    p.wait(timeout=30)
    psutil.wait_procs(victims, timeout=10)


def _kill_after_commit(watch: dict, epoch: int, timeout_s: float = 120.0) -> None:
    """SIGKILLs each run as soon as it has committed a checkpoint of ``epoch`` or later.

    ``watch`` maps a run directory to ``(alive, kill)`` callables. The runs are polled
    together: a run left alone while another is awaited would race on (and prune ``epoch``).
    """
    pending = dict(watch)
    deadline = time.monotonic() + timeout_s
    while pending:
        for run, (alive, kill) in list(pending.items()):
            # what --resume RUN will use: `latest` (written just after COMMIT.json)
            done = ckpt.list_checkpoints(run) and int(ckpt.find_checkpoint(run).name.split("-")[1])
            if done and done >= epoch:
                kill()
                del pending[run]
            elif not alive():
                raise AssertionError(f"{run}: ended before committing epoch {epoch}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{sorted(map(str, pending))}: no commit of epoch {epoch} within {timeout_s} s")
        time.sleep(0.01)


def _finish(ranks, timeout_s: float = 180.0) -> list:
    codes = ranks.wait(timeout_s, fail_grace_s=15)
    assert all(c == 0 for c in codes), ranks.report(codes)
    return ranks.results()


@pytest.mark.slow  # about 45 s here: six 2-rank launches (torch and MPI start-up dominates)
@pytest.mark.mpi
def test_kill_and_resume_on_two_ranks_equals_uninterrupted(tmp_path):
    E = 40  # epochs of the reference and of the resumed runs (headroom past the kill)
    env = {"PYTHONPATH": str(TESTS)}
    g_ref, g_run = tmp_path / "g-ref", tmp_path / "g-run"
    p_ref, p_run, p_nan = tmp_path / "p-ref", tmp_path / "p-run", tmp_path / "p-nan"
    gcfg = dict(GRAPH, epochs=E)
    pcfg = dict(PIPE, epochs=E)
    long = 100000  # the runs to be killed would go on for a long time

    # Phase 1, all at once: the references (and the NaN run) and the two runs to be killed.
    ref_g = spawn_ranks("test_checkpoint:train_rank", 2, "torch", env=env,
                        args={"jobs": [{"cfg": gcfg, "out": str(g_ref)}]})
    ref_p = spawn_ranks("test_checkpoint:train_rank", 2, "mpi", env=env, args={"jobs": [
        {"cfg": pcfg, "out": str(p_ref)},
        {"cfg": dict(pcfg, checkpoint_every=2), "out": str(p_nan), "inject": (5, 0)},
    ]})
    kill_g = spawn_ranks("test_checkpoint:train_rank", 2, "torch", env=env,
                         args={"jobs": [{"cfg": dict(gcfg, epochs=long, checkpoint_every=2), "out": str(g_run),
                                         "epoch_sleep_s": 0.05}]})
    kill_p = _mpirun_train(dict(pcfg, epochs=long, checkpoint_every=2, out=str(p_run)), tmp_path / "p-kill.log")
    try:
        _kill_after_commit({
            g_run: (lambda: all(p.poll() is None for p in kill_g.procs), kill_g.kill),
            p_run: (lambda: kill_p.poll() is None, lambda: _kill_tree(kill_p)),
        }, 3)
        killed_at = {"graph": ckpt.find_checkpoint(g_run).name, "pipeline": ckpt.find_checkpoint(p_run).name}
        killed_metrics = {"graph": _metrics(g_run), "pipeline": _metrics(p_run)}
        for name, run in (("graph", g_run), ("pipeline", p_run)):
            e = int(killed_at[name].split("-")[1])
            assert 3 <= e < E - 2, f"{name}: killed too late ({killed_at[name]}), nothing left to resume"
            assert e in [c for c, _ in ckpt.list_checkpoints(run)]
        # Phase 2: resume both (graph: harness ranks over Gloo; pipeline: the CLI over MPI).
        res_g = spawn_ranks("test_checkpoint:train_rank", 2, "torch", env=env, args={"jobs": [
            {"cfg": dict(gcfg, checkpoint_every=2, resume=str(g_run)), "out": str(g_run)}]})
        res_p = _mpirun_train(dict(pcfg, checkpoint_every=2, resume=str(p_run), out=str(p_run)),
                              tmp_path / "p-resume.log")
        try:
            out_g, out_p = _finish(ref_g), _finish(ref_p)  # per rank: one result per job
            assert all("error" not in r[0] for r in out_g + out_p), (out_g, out_p)
            got_g = _finish(res_g)
            assert "error" not in got_g[0][0], got_g
            assert res_p.wait(timeout=180) == 0, (tmp_path / "p-resume.log").read_text()[-3000:]
        finally:
            res_g.close()
            if res_p.poll() is None:
                _kill_tree(res_p)
    finally:
        for r in (ref_g, ref_p, kill_g):
            r.close()
        if kill_p.poll() is None:
            _kill_tree(kill_p)

    _same_metrics(_metrics(g_run), _metrics(g_ref), f"graph, 2 Gloo ranks, killed at {killed_at['graph']}")
    _same_metrics(_metrics(p_run), _metrics(p_ref), f"stale pipeline, mpirun, killed at {killed_at['pipeline']}")
    assert (tmp_path / "p-resume.log").read_text().count("resumed from") == 1
    for name, run in (("graph", g_run), ("pipeline", p_run)):
        _kept_from(killed_metrics[name], _metrics(run), int(killed_at[name].split("-")[1]))

    # NaN born on stage 0 (rank 0) shows in the loss on stage 1; the report names stage 0.
    nan = out_p[0][1]
    assert nan["type"] == "NonFiniteLossError", nan
    assert "at epoch 5 " in nan["error"] and "stage 0 of 2" in nan["error"], nan["error"]
    assert "(last)" not in nan["error"]
    assert out_p[1][1] == nan  # every rank stops with the same message
    assert ckpt.find_checkpoint(p_nan).name == "epoch-3"
    assert [e for e, _ in ckpt.list_checkpoints(p_nan, committed_only=False)] == [1, 3]
    assert [r["epoch"] for r in _metrics(p_nan)] == list(range(5))

    # A 2-rank checkpoint does not fit a 1-rank run: world size and chunks are named.
    with pytest.raises(GnnpipeError) as e:
        _train1(tmp_path / "one", **pcfg, resume=str(p_run))
    assert "world_size: checkpoint 2, this run 1" in str(e.value)
    assert "stages: checkpoint 2, this run 1" in str(e.value)


@pytest.mark.mpi
def test_hybrid_resume_on_four_ranks_equals_uninterrupted(tmp_path):
    """2 ways x 2 stages, stale: every rank saves its own stage's weights, optimiser state
    and buffers (history and the other ways' rows, or their snapshots) into one committed
    checkpoint, and the resumed run ends where the uninterrupted one does, with a snapshot
    (period 3) and without one (the live remote rows are then read after the resume), and
    with boundary sampling (a drawn row then reads the value its reader last received,
    possibly epochs old: the checkpoint must carry it) (MPI ranks; one launch runs the nine
    jobs in order)."""
    env = {"PYTHONPATH": str(TESTS)}
    hcfg = dict(PIPE, mode="hybrid", ways=2, stages=2, epochs=9)
    ncfg = dict(hcfg, snapshot_period=0)
    ref, run = tmp_path / "ref", tmp_path / "run"
    ref0, run0 = tmp_path / "ref0", tmp_path / "run0"
    scfg = dict(ncfg, boundary_sample=0.3)
    ref_s, run_s = tmp_path / "ref_s", tmp_path / "run_s"
    ranks = spawn_ranks("test_checkpoint:train_rank", 4, "mpi", env=env, args={"jobs": [
        {"cfg": hcfg, "out": str(ref)},
        {"cfg": dict(hcfg, epochs=6, checkpoint_every=2), "out": str(run)},
        {"cfg": dict(hcfg, checkpoint_every=2, resume=str(run)), "out": str(run)},
        {"cfg": ncfg, "out": str(ref0)},
        {"cfg": dict(ncfg, epochs=6, checkpoint_every=2), "out": str(run0)},
        {"cfg": dict(ncfg, checkpoint_every=2, resume=str(run0)), "out": str(run0)},
        {"cfg": scfg, "out": str(ref_s)},
        {"cfg": dict(scfg, epochs=6, checkpoint_every=2), "out": str(run_s)},
        {"cfg": dict(scfg, checkpoint_every=2, resume=str(run_s)), "out": str(run_s)},
    ]})
    try:
        out = _finish(ranks)
    finally:
        ranks.close()
    assert all("error" not in r for rank in out for r in rank), out
    commit = json.loads((run / "checkpoints" / "epoch-5" / "COMMIT.json").read_text())
    assert sorted(commit["files"]) == [f"rank{r}.pt" for r in range(4)]
    _same_metrics(_metrics(run), _metrics(ref), "hybrid 2x2 resumed from epoch 5")
    _same_metrics(_metrics(run0), _metrics(ref0), "hybrid 2x2 without snapshots resumed from epoch 5")
    _same_metrics(_metrics(run_s), _metrics(ref_s), "hybrid 2x2 with boundary sampling resumed from epoch 5")
    assert [r["loss"] for r in _metrics(ref_s)] != [r["loss"] for r in _metrics(ref0)]  # (the sampling acted)
    assert json.loads((run / "config.json").read_text())["resumed_from"].endswith("epoch-5")
