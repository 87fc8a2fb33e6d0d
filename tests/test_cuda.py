"""On a real GPU (marker ``cuda``; skipped where torch sees none): one process on CUDA
equals the CPU run, every tensor an executor holds is on the GPU, and keyed dropout masks
are bit-equal across devices. The device check ``scripts/gpu_check.sh`` measures the rest
(ranks sharing the GPU, speed against PyG, peak memory)."""

from __future__ import annotations

import pytest
import torch

from gnnpipe.comm import init_communicator
from gnnpipe.config import TrainConfig
from gnnpipe.data.load import load_graph_for
from gnnpipe.models import MODELS, ops
from gnnpipe.train import setup
from gnnpipe.train.loop import train

pytestmark = pytest.mark.cuda


def _cfg(**kw):
    # --method random: a GPU machine may lack pymetis (the device check's has none), and the
    # pipeline's chunks would need it
    base = dict(dataset="sbm", synth_nodes=600, synth_features=32, synth_classes=4, layers=4, hidden=32,
                epochs=3, eval_every=3, progress=False, method="random")
    base.update(kw)
    return TrainConfig(**base)


@pytest.mark.parametrize("model", MODELS)
def test_cuda_one_process_equals_cpu(model):
    losses = {}
    for dev in ("cpu", "cuda"):
        comm = init_communicator("single", device=dev)
        losses[dev] = [h["loss"] for h in train(_cfg(model=model, mode="graph", device=dev), comm)["history"]]
    assert losses["cuda"] == pytest.approx(losses["cpu"], rel=1e-4)


@pytest.mark.parametrize("mode", ["graph", "pipeline"])
def test_cuda_executor_holds_only_gpu_tensors(mode):
    comm = init_communicator("single", device="cuda")
    cfg = _cfg(model="gcnii", mode=mode, device="cuda")
    ex, _ = setup.executor_for_config(cfg, comm, load_graph_for(cfg))
    ex.train_epoch(0)
    assert ex.device.type == "cuda"
    params = list(ex.model.parameters()) if mode == "graph" else ex.params
    assert all(p.is_cuda for p in params)
    if mode == "pipeline":
        assert all(h.is_cuda for h in ex.stage.history.hist.values())
        assert all(ch.block.indptr.is_cuda for ch in ex.stage.chunks)


def test_keyed_dropout_masks_bit_equal_across_devices():
    gid = torch.arange(0, 100_000, 3)
    for p in (0.1, 0.5, 0.9):
        assert torch.equal(ops.keep_mask(gid.cuda(), 64, p, 1, 2, 3).cpu(), ops.keep_mask(gid, 64, p, 1, 2, 3))
