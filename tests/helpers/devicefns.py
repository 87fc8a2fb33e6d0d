"""Rank functions of the placement tests (run inside real ranks by gnnpipe.spawn.run_ranks).

Each run builds the executor as the trainer does, but on the stand-in device of
:mod:`fake_device` (the communicator stays on the CPU: Gloo, messages staged through the
host, as for ranks sharing a GPU), trains two epochs and evaluates, and reports every
placement mistake the stand-in saw. The same run on the CPU gives the numbers to compare.
"""

from __future__ import annotations

import torch

import gnnpipe.train.setup as setup
from helpers.fake_device import FakeDevice, cpu_tensors
from gnnpipe.data.load import load_graph_for
from helpers.rankfns import _cfg


def _run(comm, cfg, fd: FakeDevice | None) -> dict:
    graph = load_graph_for(cfg)
    ex, _ = setup.executor_for_config(cfg, comm, graph)
    out = {"cpu_after_build": cpu_tensors(ex) if fd is not None else [], "cpu_made": [], "host_reads": [],
           "read_sites": [], "uploads": [], "losses": []}
    for e in range(2):
        if fd is not None:
            fd.reset()
            FakeDevice.recording = True
        try:
            r = ex.train_epoch(e)
        finally:
            FakeDevice.recording = False
        if fd is not None:
            out["cpu_made"].append(dict(fd.cpu_made))
            out["host_reads"].append(fd.host_reads)
            out["read_sites"].append(dict(fd.read_sites))
            out["uploads"].append(fd.uploads)
        out["losses"].append(r.loss)
    out["acc"] = ex.evaluate(2)
    if fd is not None:
        out["cpu_after_epochs"] = cpu_tensors(ex)
    return out


def placement(comm, models: list, **kw) -> list:
    """Per model: the stand-in device's findings and losses, and the CPU run's losses."""
    results = []
    for model in models:
        cfg = _cfg(model=model, layers=4, epochs=2, **kw)
        res = {"model": model}
        with FakeDevice() as fd:
            orig = setup.compute_device
            setup.compute_device = lambda cfg, comm: fd.device
            try:
                res["device"] = _run(comm, cfg, fd)
            except Exception as e:  # noqa: BLE001 - a mismatch may surface wrapped (autograd, comm)
                res["device"] = {"mismatch": f"{type(e).__name__}: {e}"[:2000]}
            finally:
                setup.compute_device = orig
        res["cpu"] = _run(comm, cfg, None)
        results.append(res)
    return results
