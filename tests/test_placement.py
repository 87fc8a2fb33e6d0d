"""``--device``: every tensor an executor makes lives on the rank's device, with no host
read per chunk, in every mode (exact and stale) and for every built-in model.

CI has no GPU, so the runs use the stand-in device of ``tests/fake_device.py``: tensors that
say they are on another device and compute on the CPU, failing as a GPU would on a tensor
made on the CPU and mixed in. The communicator is Gloo on the CPU, so the messages are staged
through host memory (the path of ranks sharing one GPU). What is checked, per rank:

* after building and after two epochs, no CPU tensor is reachable from the executor;
* while training, no gnnpipe code outside the communicators made a CPU tensor, and no op
  mixed CPU and device tensors;
* the host reads the device a fixed number of times per epoch (the loss and the training
  counts, once), whatever the number of chunks;
* losses and accuracies equal the CPU run's.
"""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

from gnnpipe.spawn import run_ranks  # noqa: E402

ENV = {"PYTHONPATH": str(TESTS)}
MODELS = ["gcn", "sage", "gat", "gcnii", "resgcn+"]
#: host reads of the device per training epoch: the loss and the training counts
MAX_READS = 2

LAYOUTS = {
    "graph": (2, dict(mode="graph")),
    "pipeline-exact": (2, dict(mode="pipeline", exact=True)),
    "pipeline-stale": (2, dict(mode="pipeline", chunks=4)),
    "hybrid-exact": (4, dict(mode="hybrid", ways=2, exact=True)),
    "hybrid-stale": (4, dict(mode="hybrid", ways=2, chunks=4)),
}


def _check(rank: int, res: dict) -> None:
    where = f"rank {rank}, {res['model']}"
    dev, cpu = res["device"], res["cpu"]
    assert "mismatch" not in dev, f"{where}: {dev.get('mismatch')}"
    assert dev["cpu_after_build"] == [], f"{where}: CPU tensors after the build: {dev['cpu_after_build']}"
    assert dev["cpu_after_epochs"] == [], f"{where}: CPU tensors after training: {dev['cpu_after_epochs']}"
    for e, made in enumerate(dev["cpu_made"]):
        assert made == {}, f"{where}, epoch {e}: CPU tensors made while training: {made}"
    for e, (n, sites) in enumerate(zip(dev["host_reads"], dev["read_sites"])):
        assert n <= MAX_READS, f"{where}, epoch {e}: {n} host reads of the device (at most {MAX_READS}): {sites}"
    # deliberate host-to-device copies (gnnpipe.device.upload): only the pipeline's epoch
    # input transform makes them (the rows each chunk transforms), the same number every epoch
    ups = dev["uploads"]
    assert len(set(ups)) == 1, f"{where}: uploads per epoch change: {ups}"
    if res["layout"].startswith("graph"):
        assert ups[0] == 0, f"{where}: graph parallelism uploaded host data while training: {ups}"
    assert dev["losses"] == pytest.approx(cpu["losses"], rel=1e-5), where
    assert dev["acc"] == pytest.approx(cpu["acc"], abs=1e-9), where


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_every_tensor_on_the_device(layout):
    world, kw = LAYOUTS[layout]
    res = run_ranks("helpers.devicefns:placement", world, "torch", args={"models": MODELS, **kw}, env=ENV, timeout_s=600)
    for rank, per_model in enumerate(res):
        assert [r["model"] for r in per_model] == MODELS
        for r in per_model:
            _check(rank, {**r, "layout": layout})


def test_host_reads_do_not_grow_with_chunks():
    """The pipeline's loss and counts stay on the device across chunks: 4 and 16 chunks
    read the host the same number of times per epoch."""
    reads = {}
    for chunks in (4, 16):
        res = run_ranks("helpers.devicefns:placement", 2, "torch", args={"models": ["gcn"], "mode": "pipeline",
                                                                  "chunks": chunks}, env=ENV, timeout_s=300)
        reads[chunks] = [r[0]["device"]["host_reads"] for r in res]
    assert reads[4] == reads[16], reads
