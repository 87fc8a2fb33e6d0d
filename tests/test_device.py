"""Device and backend choice (gnnpipe.device), blocks and chunks on a device, and the
refusals a user meets on the command line: ``--device cuda`` without a GPU, NCCL with two
ranks on one GPU."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import torch


from helpers.fake_device import FakeDevice, on_device  # noqa: E402
from gnnpipe import GnnpipeError
from gnnpipe.device import choose
from gnnpipe.models.block import Block
from gnnpipe.parallel.chunks import build_chunks


def test_cpu_is_gloo_mpi_or_single():
    assert choose("cpu", "torch", 0, 4).backend == "gloo"
    assert choose("cpu", "mpi", 0, 4).backend == "mpi"
    c = choose("cpu", "single", 0, 1)
    assert (c.compute, c.comm, c.staged) == (torch.device("cpu"), torch.device("cpu"), False)


def test_one_rank_per_gpu_gets_nccl_on_its_own_gpu():
    for r in range(4):
        c = choose("cuda", "torch", r, 4, device_count=4, nccl_available=True)
        assert (c.compute, c.comm, c.backend, c.ranks_per_gpu) == (torch.device("cuda", r), torch.device("cuda", r),
                                                                    "nccl", 1)


def test_ranks_sharing_a_gpu_stage_through_gloo():
    got = [choose("cuda", "torch", r, 4, device_count=2, nccl_available=True) for r in range(4)]
    assert [c.compute.index for c in got] == [0, 0, 1, 1]  # neighbouring ranks (stages) share
    assert {c.backend for c in got} == {"gloo"} and all(c.staged for c in got)
    assert all(c.comm == torch.device("cpu") for c in got)


def test_no_nccl_falls_back_to_gloo_and_mpi_always_stages():
    assert choose("cuda", "torch", 0, 2, device_count=2, nccl_available=False).backend == "gloo"
    c = choose("cuda", "mpi", 1, 2, device_count=2)
    assert (c.backend, c.compute, c.staged) == ("mpi", torch.device("cuda", 1), True)


def test_ranks_per_gpu_override():
    got = [choose("cuda", "torch", r, 4, device_count=4, nccl_available=True, ranks_per_gpu=2) for r in range(4)]
    assert [c.compute.index for c in got] == [0, 0, 1, 1] and got[0].backend == "gloo"
    with pytest.raises(GnnpipeError, match=r"--ranks-per-gpu 1: 4 ranks on this host need 4 GPUs, the host has 2"):
        choose("cuda", "torch", 0, 4, device_count=2, ranks_per_gpu=1)


def test_nccl_with_two_ranks_on_one_gpu_is_refused_naming_the_way_out():
    with pytest.raises(GnnpipeError) as e:
        choose("cuda", "torch", 0, 2, device_count=1, nccl_available=True, backend="nccl")
    msg = str(e.value)
    assert "2 ranks on this host share 1 GPU" in msg and "--comm-backend gloo" in msg and "\n" not in msg


def test_nccl_refusals_name_the_field():
    with pytest.raises(GnnpipeError, match="needs --device cuda"):
        choose("cpu", "torch", 0, 1, backend="nccl")
    with pytest.raises(GnnpipeError, match="needs --comm torch"):
        choose("cuda", "mpi", 0, 1, device_count=1, backend="nccl")
    with pytest.raises(GnnpipeError, match="this torch .* has no NCCL"):
        choose("cuda", "torch", 0, 1, device_count=1, nccl_available=False, backend="nccl")
    with pytest.raises(GnnpipeError, match="comm_backend"):
        choose("cuda", "torch", 0, 1, device_count=1, backend="ucc")


def test_cuda_without_a_gpu_is_one_line():
    with pytest.raises(GnnpipeError, match=r"config field 'device' = 'cuda': no CUDA device available .*use --device cpu"):
        choose("cuda", "torch", 0, 1, device_count=0)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_train_with_cuda_on_a_cpu_machine_says_so_in_one_line(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    p = subprocess.run([sys.executable, "-m", "gnnpipe.train", "--dataset", "sbm", "--synth-nodes", "200",
                        "--device", "cuda", "--epochs", "1", "--out", str(tmp_path / "run")],
                       capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode != 0
    lines = [ln for ln in p.stderr.splitlines() if "cuda" in ln]
    assert any("no CUDA device available" in ln and "use --device cpu" in ln for ln in lines), p.stderr
    assert "Traceback" not in p.stderr
    assert not (tmp_path / "run").exists()  # refused before the run directory was made


def _graph(n=40, seed=0):
    rng = np.random.default_rng(seed)
    a = (rng.random((n, n)) < 0.15)
    a = np.triu(a, 1)
    a = a | a.T
    indptr = np.concatenate([[0], np.cumsum(a.sum(1))]).astype(np.int64)
    indices = np.nonzero(a)[1].astype(np.int64)
    return indptr, indices


def test_block_to_moves_every_field_and_rebuilds_derived_matrices_there():
    indptr, indices = _graph()
    b = Block.from_rows(indptr, indices, np.arange(10, 25))
    b.gcn_adj()  # a cached derived matrix must not follow (it is rebuilt on the device)
    with FakeDevice() as fd:
        meta = b.to(fd.device)
        assert meta._cache == {}
        assert all(on_device(m) for m in meta.gcn_adj())  # rebuilt there
    for name in ("indptr", "indices", "src_deg", "dst_deg", "dst_gid", "src_gid", "dst_in_src"):
        assert getattr(meta, name).device.type == "meta", name
        assert getattr(meta, name).shape == getattr(b, name).shape, name
    assert (meta.num_src, meta.symmetric, meta.device.type) == (b.num_src, b.symmetric, "meta")
    assert b.to("cpu") is b
    back = Block(**{n: getattr(b, n).clone() for n in ("indptr", "indices", "src_deg", "dst_deg", "dst_gid",
                                                       "src_gid", "dst_in_src")}, num_src=b.num_src)
    assert torch.equal(back.gcn_norm(), b.gcn_norm())


def test_chunk_to():
    indptr, indices = _graph()
    ch = build_chunks(indptr, indices, [0, 20, 40])[1]
    with FakeDevice() as fd:
        m = ch.to(fd.device)
        assert torch.equal(m.src_ids().cpu(), ch.src_ids())
    assert (m.lo, m.hi, m.index) == (ch.lo, ch.hi, ch.index)
    assert m.nbr_ids.device.type == "meta" and m.block.device.type == "meta"


def test_a_gpu_communicator_with_a_cpu_config_is_refused_not_run_on_the_cpu():
    """The device check of 2026-12-04 trained on the CPU for a while without anyone seeing it:
    its communicator was made for cuda and its TrainConfig kept the default device cpu. Such a
    pair is now refused, naming both and the way out."""
    from types import SimpleNamespace

    from gnnpipe.config import TrainConfig
    from gnnpipe.train.setup import compute_device

    comm = SimpleNamespace(compute_device=torch.device("cuda", 0))
    with pytest.raises(GnnpipeError, match=r"computes on cuda:0 but the config says --device cpu.*device='cuda'"):
        compute_device(TrainConfig(), comm)
    assert compute_device(TrainConfig(device="cuda"), comm) == torch.device("cuda", 0)
    cpu = SimpleNamespace(compute_device=torch.device("cpu"))
    assert compute_device(TrainConfig(), cpu) == torch.device("cpu")
    assert compute_device(TrainConfig(device="cuda"), SimpleNamespace()) == torch.device("cuda")
