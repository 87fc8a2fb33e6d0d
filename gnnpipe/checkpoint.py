"""Checkpoints: per-rank files committed atomically, resume validation (floor 4).

Layout inside a run directory::

    checkpoints/
        epoch-3/            the state at the END of epoch 3 (0-based)
            rank0.pt        rank 0's file (torch.save, loadable with weights_only=True)
            rank1.pt
            COMMIT.json     written by rank 0 LAST: epoch, world size, every rank file's
                            size and sha256, the run identity (config, dataset hash, plan)
        epoch-5/
        latest              the name of the newest committed checkpoint ("epoch-5")

Commit protocol (a crash at any point leaves the previous checkpoint intact and usable):

1. rank 0 removes a stale ``COMMIT.json`` from the target directory (left by an abandoned
   run that got further), then every rank passes a barrier;
2. every rank writes ``rank<k>.pt.tmp``, fsyncs it, renames it to ``rank<k>.pt`` and fsyncs
   the directory;
3. an all-reduce tells every rank whether every write succeeded and carries each file's
   size and sha256 to rank 0 (it doubles as the barrier "every rank has written");
4. rank 0 writes ``COMMIT.json`` (temp file, fsync, rename), then ``latest`` (the same);
5. rank 0 deletes older checkpoints beyond the newest ``keep`` and any uncommitted debris
   older than the new one.

A directory without ``COMMIT.json`` is never loaded. On resume, ``latest`` is only a hint: a
run directory resolves to the newest committed checkpoint when ``latest`` is missing or
names an uncommitted one.

The files assume a file system every rank sees (one host, or a shared file system).
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gnnpipe._base import GnnpipeError
from gnnpipe.config import MATH_FIELDS
from gnnpipe.dims import ParallelDims

log = logging.getLogger(__name__)

CHECKPOINT_DIR = "checkpoints"
COMMIT_FILE = "COMMIT.json"
LATEST_FILE = "latest"
FORMAT = "gnnpipe-checkpoint"
FORMAT_VERSION = 1
_NAME = re.compile(r"^epoch-(\d+)$")

# Fields that may change between the killed run and its resumption (everything else in
# the config, e.g. threads, timeout, comm, device, root, does not change the numbers
# either, and is not compared).
FREE_FIELDS = ("epochs", "eval_every", "out", "progress", "checkpoint_every", "resume")


class CheckpointMismatchError(GnnpipeError):
    """The checkpoint was written by a run whose math differs from this one."""


class CheckpointWriteError(GnnpipeError):
    """A checkpoint could not be written; every rank agreed and raises it (rank 0 reports)."""


def run_identity(cfg, dims: ParallelDims, dataset_hash: str, plan_params: dict | None) -> dict:
    """What a checkpoint must agree with to be resumed by this run.

    The layout fields come from the resolved ``dims``, so ``--stages 2`` on two ranks
    matches a run that left it at 0 (their recorded form is unchanged since format 1:
    graph mode records ``parts`` and zero stages/chunks, pipeline mode zero parts).

    Returns:
        A JSON-serialisable dict: every field of :data:`gnnpipe.config.MATH_FIELDS` (the
        layout resolved), ``world_size``, ``dataset_hash`` and ``plan_params``.
    """
    ident = {name: getattr(cfg, name) for name in MATH_FIELDS}
    if dims.mode == "graph":
        ident.update(parts=dims.parts, stages=0, chunks=0)  # stages/chunks: unused in graph mode
    else:
        ident.update(stages=dims.stages, chunks=dims.chunks, parts=dims.parts if dims.mode == "hybrid" else 0)
    ident["world_size"] = dims.world
    ident["dataset_hash"] = dataset_hash
    # JSON round trip: tuples become lists, numpy scalars plain numbers, as in COMMIT.json.
    ident["plan_params"] = json.loads(json.dumps(plan_params, default=_jsonable, sort_keys=True))
    return ident


#: Math fields added after checkpoints already existed, with the value every earlier run had
#: (a checkpoint that lacks one was written with it).
ABSENT_MEANS = {"wire": "float32", "grad_scale": 2.0, "refresh_epochs": 0, "exact_every": 0, "boundary_sample": 1.0,
                "drift_bound": 0.0, "exact_from": 0}


def compare_identity(saved: dict, current: dict, where: str | Path) -> None:
    """Raises :class:`CheckpointMismatchError` naming every differing field and both values."""
    saved = {**{k: v for k, v in ABSENT_MEANS.items() if k in current}, **saved}
    diffs = []
    for key in sorted(set(saved) | set(current)):
        a, b = saved.get(key, "<absent>"), current.get(key, "<absent>")
        if a != b:
            diffs.append(f"{key}: checkpoint {a!r}, this run {b!r}")
    if diffs:
        raise CheckpointMismatchError(
            f"cannot resume from {where}: it was written by a different setup ("
            + "; ".join(diffs)
            + f"). Only {', '.join(FREE_FIELDS)} may change on resume; rerun with the "
            "checkpoint's values or start a new run without --resume"
        )


# ---------------------------------------------------------------------- listing
def checkpoint_root(out: str | Path) -> Path:
    return Path(out) / CHECKPOINT_DIR


def checkpoint_dir(out: str | Path, epoch: int) -> Path:
    """``<out>/checkpoints/epoch-<epoch>``."""
    return checkpoint_root(out) / f"epoch-{int(epoch)}"


def is_committed(path: str | Path) -> bool:
    return (Path(path) / COMMIT_FILE).is_file()


def list_checkpoints(out: str | Path, committed_only: bool = True) -> list[tuple[int, Path]]:
    """``(epoch, dir)`` of the checkpoints under a run directory, oldest first."""
    root = checkpoint_root(out)
    found = []
    if root.is_dir():
        for d in root.iterdir():
            m = _NAME.match(d.name)
            if m and d.is_dir() and (is_committed(d) or not committed_only):
                found.append((int(m.group(1)), d))
    return sorted(found)


def find_checkpoint(path: str | Path) -> Path:
    """The committed checkpoint directory that ``--resume PATH`` means.

    Args:
        path: a checkpoint directory (``.../checkpoints/epoch-E``), a run directory (its
            ``latest`` checkpoint, or the newest committed one when ``latest`` is missing
            or names an uncommitted directory) or a run's ``checkpoints`` folder.

    Raises:
        GnnpipeError: the path does not exist, is an uncommitted checkpoint, or holds no
            committed checkpoint.
    """
    p = Path(path)
    if not p.is_dir():
        raise GnnpipeError(f"--resume {p}: no such directory (expected a run directory or "
                           f"a checkpoint directory {CHECKPOINT_DIR}/epoch-<E>)")
    if _NAME.match(p.name):
        if not is_committed(p):
            older = [d for e, d in list_checkpoints(p.parent.parent) if d.name != p.name]
            hint = f"; committed ones there: {', '.join(d.name for d in older)}" if older else ""
            raise GnnpipeError(f"--resume {p}: checkpoint has no {COMMIT_FILE} (its write "
                               f"was interrupted), so it cannot be trusted{hint}")
        return p
    run = p.parent if p.name == CHECKPOINT_DIR else p
    root = checkpoint_root(run)
    latest = root / LATEST_FILE
    if latest.is_file():
        name = latest.read_text().strip()
        if _NAME.match(name) and is_committed(root / name):
            return root / name
        log.warning("%s names %r, which is not a committed checkpoint; using the newest "
                    "committed one", latest, name)
    found = list_checkpoints(run)
    if not found:
        raise GnnpipeError(f"--resume {p}: no committed checkpoint under {root} "
                           f"(train with --checkpoint-every N to write some)")
    return found[-1][1]


def read_commit(ckpt: str | Path) -> dict:
    """The parsed ``COMMIT.json`` of a checkpoint directory."""
    path = Path(ckpt) / COMMIT_FILE
    try:
        commit = json.loads(path.read_text())
    except FileNotFoundError:
        raise GnnpipeError(f"{path}: missing; the checkpoint was never committed") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise GnnpipeError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(commit, dict):
        raise GnnpipeError(f"{path}: holds a JSON {type(commit).__name__}, expected an object")
    if commit.get("format") != FORMAT or commit.get("format_version") != FORMAT_VERSION:
        raise GnnpipeError(f"{path}: format {commit.get('format')!r} version "
                           f"{commit.get('format_version')!r}, expected {FORMAT!r} version "
                           f"{FORMAT_VERSION}")
    # A hand-edited or damaged commit must fail here, in one line, not as a KeyError later.
    for key, typ in (("epoch", int), ("world_size", int), ("files", dict), ("identity", dict)):
        if not isinstance(commit.get(key), typ) or isinstance(commit.get(key), bool):
            raise GnnpipeError(f"{path}: field {key!r} is {commit.get(key, '<absent>')!r}, expected a JSON "
                               f"{'integer' if typ is int else 'object'}")
    if not isinstance(commit.get("config"), (dict, type(None))):
        raise GnnpipeError(f"{path}: field 'config' is {commit['config']!r}, expected a JSON object")
    return commit


# ---------------------------------------------------------------------- save
def rng_state() -> dict:
    """torch's and numpy's global RNG states, as tensors (``weights_only`` loadable).

    The executors draw nothing from them (dropout and chunk order are pure functions of
    seed and epoch); they are saved so that code which does draw resumes identically.
    """
    np_state = np.random.get_state(legacy=False)
    return {
        "torch": torch.get_rng_state(),
        "numpy_key": torch.from_numpy(np.asarray(np_state["state"]["key"], dtype=np.int64)),
        "numpy_pos": int(np_state["state"]["pos"]),
        "numpy_has_gauss": int(np_state["has_gauss"]),
        "numpy_gauss": float(np_state["gauss"]),
    }


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state({
        "bit_generator": "MT19937",
        "state": {"key": state["numpy_key"].numpy().astype(np.uint32), "pos": state["numpy_pos"]},
        "has_gauss": state["numpy_has_gauss"],
        "gauss": state["numpy_gauss"],
    })


def save_checkpoint(comm, out: str | Path, epoch: int, payload: dict, identity: dict,
                    keep: int = 2, config: dict | None = None) -> Path:
    """Writes and commits this epoch's checkpoint; collective over ``comm``.

    Args:
        comm: the world communicator (every rank calls this with the same ``epoch``).
        out: the run directory.
        epoch: the epoch just finished (0-based).
        payload: this rank's state (``torch.save``-able with tensors, dicts, lists and
            plain values only).
        identity: :func:`run_identity` of this run (rank 0 writes it into ``COMMIT.json``).
        keep: committed checkpoints to keep (the new one included); older ones are deleted.
        config: the run's whole configuration, recorded in ``COMMIT.json`` so that
            ``--resume`` can default every setting to it.

    Returns:
        The committed checkpoint directory.

    Raises:
        CheckpointWriteError: on every rank when any rank could not write its file, or rank 0
            its commit, whatever the write raised (naming the ranks and the path).
    """
    if keep < 1:
        raise GnnpipeError(f"checkpoint keep: expected an integer >= 1, got {keep}")
    d = checkpoint_dir(out, epoch)
    rank, world = comm.rank, comm.world_size
    t0 = time.perf_counter()
    pre_err: OSError | None = None
    if rank == 0:
        try:
            d.mkdir(parents=True, exist_ok=True)
            stale = d / COMMIT_FILE
            if stale.exists():  # from an abandoned run that got further; must not bless our files
                stale.unlink()
                _fsync_dir(d)
        except OSError as e:  # reported after the barrier, through the same agreement
            pre_err = e
    comm.barrier(category="control")
    # One row per rank: ok flag, file size, sha256 bytes; summed, so rank 0 learns them all.
    info = torch.zeros(world, 34, dtype=torch.int64)
    err: Exception | None = None
    try:
        if pre_err is not None:
            raise pre_err
        d.mkdir(parents=True, exist_ok=True)
        path = d / f"rank{rank}.pt"
        tmp = d / f"rank{rank}.pt.tmp"
        with open(tmp, "wb") as f:
            torch.save(payload, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_dir(d)
        digest = _sha256(path)
        info[rank, 0] = 1
        info[rank, 1] = path.stat().st_size
        info[rank, 2:] = torch.tensor(list(digest), dtype=torch.int64)
    except Exception as e:  # noqa: BLE001 - torch.save raises RuntimeError on a full disk, not OSError
        # Whatever the write raised, this rank must still join the all-reduce below, or the
        # others would wait out the timeout.
        err = e
        info[rank, 0] = 0
        info[rank, 1] = -_errno(e, d)  # so rank 0 can say why another rank failed
        for junk in (d / f"rank{rank}.pt.tmp", d / f"rank{rank}.pt"):
            try:
                junk.unlink(missing_ok=True)
            except OSError:
                pass
    if world > 1:
        comm.all_reduce(info, op="sum", category="control")
    failed = [k for k in range(world) if int(info[k, 0]) != 1]
    if failed:
        if rank == 0:
            shutil.rmtree(d, ignore_errors=True)  # uncommitted: its rank files are useless now
        msg = f"checkpoint {d}: rank(s) {', '.join(map(str, failed))} could not write their file"
        if err is not None:
            msg += f" (rank {rank}: {_one_line(err, d)})"
        else:
            codes = {int(-info[k, 1]) for k in failed if int(info[k, 1]) < 0}
            if codes:
                msg += f" ({'; '.join(os.strerror(c) for c in sorted(codes))})"
        raise CheckpointWriteError(msg + "; earlier checkpoints are intact")
    commit_err = _commit(comm, d, out, epoch, info, identity, config, keep) if rank == 0 else None
    if world > 1:
        # Rank 0 alone writes COMMIT.json; every rank learns whether that worked.
        ok = torch.tensor([0 if commit_err else 1], dtype=torch.int64)
        comm.all_reduce(ok, op="min", category="control")
        if int(ok) == 0 and commit_err is None:
            commit_err = "rank 0 could not write COMMIT.json"
    if commit_err:
        raise CheckpointWriteError(f"checkpoint {d}: {commit_err}; earlier checkpoints are intact")
    if rank == 0:
        log.info("checkpoint %s committed (%.2f s, %d bytes on rank 0)", d,
                 time.perf_counter() - t0, int(info[0, 1]))
    return d


def _errno(e: BaseException, d: Path) -> int:
    """The errno behind a failed write (ENOSPC for torch's RuntimeError on a full disk; 0: unknown)."""
    if isinstance(e, OSError) and e.errno:
        return int(e.errno)
    return errno.ENOSPC if _one_line(e, d).startswith("no space left") else 0


def _one_line(e: BaseException, d: Path | None = None) -> str:
    """An exception as one short line (torch's messages can span several).

    torch.save reports a full disk as a ``RuntimeError`` about stream positions; when the
    file system under ``d`` has no space left, the line says so first.
    """
    if isinstance(e, OSError) and e.strerror:
        where = f" ({e.filename})" if e.filename else ""
        return f"{e.strerror}{where}"
    first = (str(e).strip().splitlines() or [""])[0]
    text = f"{type(e).__name__}: {first}" if first else type(e).__name__
    try:
        full = d is not None and os.statvfs(next(p for p in [d, *d.parents] if p.exists())).f_bavail == 0
    except (OSError, StopIteration):
        full = False
    return f"no space left on device ({text})" if full else text


def _commit(comm, d: Path, out, epoch: int, info: torch.Tensor, identity: dict, config: dict | None,
            keep: int) -> str | None:
    """Rank 0's commit step; returns why it failed (the directory is then removed), or None."""
    world = comm.world_size
    try:
        _write_commit(d, out, epoch, world, info, identity, config, keep)
    except Exception as e:  # noqa: BLE001 - a full disk; the caller makes every rank agree
        for tmp in (d / (COMMIT_FILE + ".tmp"), checkpoint_root(out) / (LATEST_FILE + ".tmp")):
            try:
                tmp.unlink(missing_ok=True)
            except OSError:
                pass
        # COMMIT.json first, so a half-removed directory is never taken for a checkpoint;
        # `latest` still names the previous one (it is written after COMMIT.json).
        try:
            (d / COMMIT_FILE).unlink(missing_ok=True)
        except OSError:
            pass
        shutil.rmtree(d, ignore_errors=True)
        return f"rank 0 could not commit it ({_one_line(e, d)})"
    return None


def _write_commit(d: Path, out, epoch: int, world: int, info: torch.Tensor, identity: dict,
                  config: dict | None, keep: int) -> None:
    """Rank 0: ``COMMIT.json``, then ``latest``, then pruning (see the module docstring)."""
    commit = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "epoch": int(epoch),
        "world_size": world,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "files": {
            f"rank{k}.pt": {"bytes": int(info[k, 1]),
                            "sha256": bytes(int(b) for b in info[k, 2:]).hex()}
            for k in range(world)
        },
        "identity": identity,
        "config": config,
    }
    _atomic_write(d / COMMIT_FILE, json.dumps(commit, indent=2, sort_keys=True, default=_jsonable) + "\n")
    _atomic_write(checkpoint_root(out) / LATEST_FILE, d.name + "\n")
    _prune(out, int(epoch), keep)


def _prune(out: str | Path, epoch: int, keep: int) -> None:
    """Keeps the new checkpoint and the ``keep - 1`` newest committed ones before it.

    Directories of later epochs (an abandoned run that got further before it was resumed
    from an earlier checkpoint) are left alone: this run overwrites them as it gets there.
    """
    older = [(e, d) for e, d in list_checkpoints(out, committed_only=False) if e < epoch]
    committed = [(e, d) for e, d in older if is_committed(d)]
    survivors = {d for _, d in committed[len(committed) - (keep - 1):]} if keep > 1 else set()
    for _, d in older:
        if d not in survivors:
            # COMMIT.json first: a crash halfway through leaves an uncommitted (ignored) dir.
            try:
                (d / COMMIT_FILE).unlink(missing_ok=True)
            except OSError:
                pass
            shutil.rmtree(d, ignore_errors=True)


# ---------------------------------------------------------------------- load
def load_checkpoint(ckpt: str | Path, rank: int, identity: dict) -> tuple[dict, dict]:
    """This rank's state from a committed checkpoint, after checking it fits this run.

    Args:
        ckpt: a committed checkpoint directory (see :func:`find_checkpoint`).
        rank: this rank.
        identity: :func:`run_identity` of this run.

    Returns:
        ``(commit, payload)``: the parsed ``COMMIT.json`` and this rank's payload.

    Raises:
        CheckpointMismatchError: the run identity differs (every differing field named).
        GnnpipeError: the rank file is missing or its size or sha256 differs from the commit.
    """
    ckpt = Path(ckpt)
    commit = read_commit(ckpt)
    compare_identity(commit["identity"], identity, ckpt)
    return commit, read_rank_payload(ckpt, commit, rank)


def read_rank_payload(ckpt: str | Path, commit: dict, rank: int) -> dict:
    """Rank ``rank``'s payload of a committed checkpoint, checked against ``COMMIT.json``.

    Raises:
        GnnpipeError: the rank file is missing, or its size or sha256 differs from the commit.
    """
    ckpt = Path(ckpt)
    name = f"rank{rank}.pt"
    path = ckpt / name
    expect = commit["files"].get(name)
    if expect is None:
        raise GnnpipeError(f"{ckpt}/{COMMIT_FILE} lists no {name}")
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise GnnpipeError(f"{path}: missing although {COMMIT_FILE} lists it") from None
    if size != expect["bytes"] or _sha256(path).hex() != expect["sha256"]:
        raise GnnpipeError(f"{path}: {size} bytes with sha256 {_sha256(path).hex()}, but "
                           f"{COMMIT_FILE} recorded {expect['bytes']} bytes with sha256 "
                           f"{expect['sha256']}: the file was changed or damaged")
    payload = torch.load(path, map_location="cpu", weights_only=True)
    if payload.get("epoch") != commit["epoch"] or payload.get("rank") != rank:
        raise GnnpipeError(f"{path}: holds epoch {payload.get('epoch')} rank "
                           f"{payload.get('rank')}, expected epoch {commit['epoch']} rank {rank}")
    return payload


# ---------------------------------------------------------------------- helpers
def _sha256(path: Path) -> bytes:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.digest()


def _fsync_dir(d: Path) -> None:
    # A rename is durable only once its directory entry is flushed.
    try:
        fd = os.open(d, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _jsonable(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, (set, tuple)):
        return list(o)
    return str(o)
