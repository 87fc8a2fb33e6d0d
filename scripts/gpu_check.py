"""The device check of issue 19: gnnpipe on one GPU, measured (``scripts/gpu_check.sh`` runs it).

Parts, each timed and reported on its own (a part that fails is recorded, not fatal):

* ``env``: torch, CUDA, the GPU, and which optional pieces are missing (pymetis, an MPI
  runtime, DGL); multi-rank runs partition with ``--method random`` where METIS is missing.
* ``exact``: one process, ``--device cuda`` against ``--device cpu`` for every built-in model
  (graph mode, 3 epochs): losses within 1e-4 relative; keyed dropout masks bit-equal on both
  devices.
* ``ranks``: 2 and 4 ranks sharing the GPU (torchrun, Gloo with host staging): exact graph,
  pipeline and hybrid runs equal the one-process GPU run (losses 1e-4 relative); and NCCL
  asked for with two ranks on one GPU is refused in one line.
* ``speed``: one process, GCN-32 d=128 on a generated graph (1M nodes, 20M directed edges):
  gnnpipe's epoch against PyG's fastest path on the same GPU (GCNConv on a cached,
  pre-normalised CSR ``adj_t``; and ``edge_index``), and the epoch's roofline from the
  device's measured copy bandwidth and GEMM / SpMM rates.
* ``profile``: the cost model's GPU profile, measured (``gnnpipe.cost.calibrate.calibrate_device``:
  GEMM, SpMM, copy, the unit fit, the history path), written as ``<out>/gpu_profile.toml``.
* ``pytest``: the ``cuda``-marked tests (``tests/test_cuda.py``) on the device.
* peak GPU memory of every run; the top kernels of one gnnpipe GCN-32 epoch (``<out>/kernels.txt``).

Writes ``<out>/gpu_check.json`` and ``<out>/gpu_check.md``. ``--device cpu --small`` is the
dry run that must pass on a CPU before the device time is spent.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as Fn

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from gnnpipe import device  # noqa: E402
from gnnpipe.comm import init_communicator  # noqa: E402
from gnnpipe.config import TrainConfig  # noqa: E402
from gnnpipe.cost.calibrate import time_call  # noqa: E402
from gnnpipe.models import MODELS, Block, ModelConfig, RunCtx, build_model, loss_fn, ops  # noqa: E402

RESULTS: dict = {}
OUT: list[Path] = []  # where report() writes, set by main(): every finished part is written at once


def log(msg: str) -> None:
    print(f"[gpu_check {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def part(name: str):
    def deco(fn):
        def run(*a, **kw):
            t0 = time.perf_counter()
            log(f"== {name}")
            try:
                RESULTS[name] = fn(*a, **kw)
                RESULTS[name]["ok"] = RESULTS[name].get("ok", True)
            except Exception as e:  # noqa: BLE001 - every part reports, none stops the check
                traceback.print_exc()
                RESULTS[name] = {"ok": False, "error": f"{type(e).__name__}: {e}"}
            RESULTS[name]["seconds"] = round(time.perf_counter() - t0, 1)
            log(f"   {name}: {'ok' if RESULTS[name]['ok'] else 'FAILED'} in {RESULTS[name]['seconds']} s")
            if OUT:  # a check cut off by its time limit still leaves every finished part
                report(OUT[0], quiet=True)
        return run
    return deco


def peak_mb(dev: torch.device) -> float | None:
    peak = device.peak_memory(dev)
    return None if peak is None else round(peak / 2**20, 1)


@part("env")
def env(dev: torch.device) -> dict:
    out = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
           "device": str(dev), "cores": os.cpu_count()}
    if dev.type == "cuda":
        p = torch.cuda.get_device_properties(dev)
        out.update(gpu=p.name, gpu_mem_gib=round(p.total_memory / 2**30, 1), gpus=torch.cuda.device_count(),
                   nccl=torch.distributed.is_nccl_available())
    missing = [m for m in ("pymetis", "dgl", "torch_geometric", "mpi4py") if importlib.util.find_spec(m) is None]
    if shutil.which("mpirun") is None and shutil.which("mpiexec") is None:
        missing.append("an MPI runtime (mpirun)")
    out["missing_optional"] = missing
    log(f"   {out}")
    return out


def _cfg(**kw) -> TrainConfig:
    base = dict(dataset="sbm", synth_nodes=3000, synth_degree=10.0, synth_features=64, synth_classes=6,
                layers=8, hidden=64, dropout=0.5, epochs=3, eval_every=3, progress=False, seed=0)
    base.update(kw)
    return TrainConfig(**base)


def _one_process(cfg: TrainConfig, kind: str) -> dict:
    from gnnpipe.train.loop import train

    # cfg.device must name the device too: the executor computes on the communicator's
    # device only where the two agree (gnnpipe.train.setup.compute_device). The check of
    # 2026-12-04 missed this, and its 'exact' part compared the CPU with itself (peak 0 MiB).
    cfg = dataclasses.replace(cfg, device=kind)
    comm = init_communicator("single", device=kind)
    dev = comm.compute_device
    device.reset_peak_memory(dev)
    summary = train(cfg, comm)
    losses = [h["loss"] for h in summary["history"]]
    return {"losses": losses, "final": summary["history"][-1], "peak_gpu_mb": peak_mb(dev)}


def _rel(a: list, b: list) -> float:
    return max(abs(x - y) / max(abs(y), 1e-12) for x, y in zip(a, b))


@part("exact")
def exact(dev: torch.device, small: bool) -> dict:
    rows, ok = [], True
    for model in MODELS:
        cfg = _cfg(model=model, mode="graph", **({"synth_nodes": 400, "layers": 4} if small else {}))
        g = _one_process(cfg, dev.type)
        c = _one_process(cfg, "cpu")
        rel = _rel(g["losses"], c["losses"])
        # on a GPU the run must have used it: a peak of 0 bytes means it trained on the CPU
        used = dev.type == "cpu" or bool(g["peak_gpu_mb"])
        rows.append({"model": model, "losses_device": g["losses"], "losses_cpu": c["losses"], "max_rel": rel,
                     "peak_gpu_mb": g["peak_gpu_mb"], "ok": rel <= 1e-4 and used})
        ok &= rel <= 1e-4 and used
        log(f"   {model}: max relative loss difference {rel:.2e}, peak {g['peak_gpu_mb']} MiB")
    gid = torch.arange(0, 200_000, 7, dtype=torch.int64)
    masks_equal = all(
        torch.equal(ops.keep_mask(gid.to(dev), 128, p, 3, 5, u).cpu(), ops.keep_mask(gid, 128, p, 3, 5, u))
        for p in (0.1, 0.5) for u in (0, 7))
    log(f"   keyed dropout masks bit-equal across devices: {masks_equal}")
    return {"ok": ok and masks_equal, "models": rows, "dropout_masks_equal": masks_equal}


def _torchrun(n: int, args: list[str], out: Path, timeout: int) -> tuple[int, str]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={n}",
           "-m", "gnnpipe.train", *args, "--out", str(out), "--no-progress"]
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "OMP_NUM_THREADS": "2"}
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO)
    if p.returncode != 0 and OUT:  # the whole of a failed run's output, every rank's error in it
        with open(OUT[0] / "ranks_failures.log", "a") as f:
            f.write(f"==== {' '.join(args)}\n--- stdout\n{p.stdout}\n--- stderr\n{p.stderr}\n")
    return p.returncode, p.stdout[-3000:] + p.stderr[-3000:]


def _metrics(out: Path) -> list[dict]:
    return [json.loads(ln) for ln in (out / "metrics.jsonl").read_text().splitlines() if ln.strip()]


@part("ranks")
def ranks(dev: torch.device, small: bool, tmp: Path, only: list[str] | None = None) -> dict:
    size = {"synth_nodes": 400, "layers": 4} if small else {}
    base = ["--dataset", "sbm", "--synth-nodes", str(size.get("synth_nodes", 3000)), "--synth-degree", "10",
            "--synth-features", "64", "--synth-classes", "6", "--model", "gcnii", "--layers",
            str(size.get("layers", 8)), "--hidden", "64", "--epochs", "3", "--eval-every", "3",
            "--device", dev.type, "--method", "random", "--exact", "--debug"]
    cfg = _cfg(model="gcnii", mode="graph", **size)
    ref = _one_process(cfg, dev.type)
    rows, ok = [], True
    for n, mode, extra in ((2, "graph", []), (4, "graph", []), (2, "pipeline", []), (4, "pipeline", []),
                           (4, "hybrid", ["--ways", "2"])):
        if only and f"{mode}{n}" not in only:
            continue
        out = tmp / f"{mode}{n}"
        backend = ["--comm-backend", "gloo"] if dev.type == "cuda" else []
        rc, text = _torchrun(n, base + ["--mode", mode, *extra, *backend], out, 300)
        row = {"ranks": n, "mode": mode, "rc": rc}
        if rc == 0:
            m = _metrics(out)
            row["losses"] = [r["loss"] for r in m]
            row["max_rel"] = _rel(row["losses"], ref["losses"])
            row["peak_gpu_mem_mb"] = m[-1].get("peak_gpu_mem_mb")
            row["ok"] = row["max_rel"] <= 1e-4
        else:
            row.update(ok=False, tail=text[-1500:])
        ok &= row["ok"]
        rows.append(row)
        log(f"   {mode} on {n} ranks: rc {rc}, max relative loss difference {row.get('max_rel')}, "
            f"peak GPU MiB per rank {row.get('peak_gpu_mem_mb')}")
    refusal = None
    if dev.type == "cuda" and torch.cuda.device_count() == 1:
        rc, text = _torchrun(2, base + ["--mode", "graph", "--comm-backend", "nccl"], tmp / "nccl", 120)
        lines = [ln for ln in text.splitlines() if "NCCL" in ln and "share" in ln]
        refusal = {"rc": rc, "line": lines[0] if lines else None, "ok": rc != 0 and bool(lines)}
        ok &= refusal["ok"]
        log(f"   NCCL with 2 ranks on 1 GPU: {refusal}")
    return {"ok": ok, "reference_losses": ref["losses"], "runs": rows, "nccl_refusal": refusal}


def _rate(fn, flops_or_bytes: float, dev: torch.device, k: int = 5) -> float:
    """Work per second of ``fn``'s fastest of ``k`` synchronised wall-clock calls."""
    return flops_or_bytes / time_call(fn, k, best=True, cpu=False, dev=dev)


def _epoch_time(step, dev: torch.device, epochs: int) -> float:
    step(0)
    device.synchronize(dev)
    ts = []
    for e in range(epochs):
        t0 = time.perf_counter()
        step(e + 1)
        device.synchronize(dev)
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


@part("speed")
def speed(dev: torch.device, small: bool, out: Path) -> dict:
    from torch_geometric.nn import GCNConv

    from gnnpipe.data.synthetic import sbm

    n, deg, d, L, f, c = (20_000, 20.0, 128, 4, 128, 16) if small else (1_000_000, 20.0, 128, 32, 128, 16)
    t0 = time.perf_counter()
    g = sbm(n, num_classes=c, avg_degree=deg, num_features=f, seed=0)
    log(f"   graph: {g.num_nodes} nodes, {g.num_edges} directed edges, made in {time.perf_counter() - t0:.0f} s")
    ip = torch.as_tensor(np.asarray(g.indptr, dtype=np.int64))
    ix = torch.as_tensor(np.asarray(g.indices, dtype=np.int64))
    x = torch.as_tensor(np.asarray(g.features, dtype=np.float32)).to(dev)
    y = torch.as_tensor(np.asarray(g.labels)).to(dev)
    train = torch.as_tensor(np.asarray(g.train_mask, dtype=bool)).to(dev)
    nnz = int(ix.numel())
    res: dict = {"nodes": int(g.num_nodes), "edges": nnz, "features": f, "hidden": d, "layers": L}
    epochs = 3 if small else 5

    block = Block.full(ip, ix).to(dev)
    m = build_model(ModelConfig("gcn", f, c, layers=L, hidden=d, dropout=0.5), 0).to(dev)
    opt = torch.optim.Adam(m.parameters(), lr=1e-3)

    def ours(ep):
        opt.zero_grad()
        loss_fn(m(block, x, RunCtx(True, ep, 0)), y, train, normalizer=int(train.sum())).backward()
        opt.step()
    if dev.type == "cuda":  # the same epoch with the elementwise chains unfused (gnnpipe.models.fused)
        os.environ["GNNPIPE_COMPILE"] = "0"
        res["gnnpipe_unfused_s"] = _epoch_time(ours, dev, epochs)
        os.environ.pop("GNNPIPE_COMPILE")
        log(f"   gnnpipe GCN-{L} unfused (GNNPIPE_COMPILE=0): {res['gnnpipe_unfused_s']:.4f} s/epoch")
    device.reset_peak_memory(dev)
    t0 = time.perf_counter()
    res["gnnpipe_s"] = _epoch_time(ours, dev, epochs)
    res["gnnpipe_first_epochs_s"] = round(time.perf_counter() - t0, 1)  # the compile is in the warm-up
    res["gnnpipe_peak_gpu_mb"] = peak_mb(dev)
    from gnnpipe.models import fused
    res["fused_failed"] = sorted(fused._FAILED)
    log(f"   gnnpipe GCN-{L}: {res['gnnpipe_s']:.4f} s/epoch, peak {res['gnnpipe_peak_gpu_mb']} MiB")
    res["kernels"] = _kernel_table(ours, dev, out / "kernels.txt", f"gnnpipe GCN-{L}, {n} nodes, {nnz} edges, d={d}")
    del m, opt, block

    # PyG's fastest path: GCNConv on a cached, pre-normalised CSR adj_t (and on edge_index)
    degf = (ip[1:] - ip[:-1]).to(torch.float32) + 1.0
    rows = torch.repeat_interleave(torch.arange(n), ip[1:] - ip[:-1])
    norm = torch.rsqrt(degf[rows] * degf[ix])
    # Â = D^-1/2 (A + I) D^-1/2 in CSR: the self loop of row v is 1/deg(v)
    loops = torch.arange(n)
    allr = torch.cat([rows, loops])
    allc = torch.cat([ix, loops])
    allv = torch.cat([norm, 1.0 / degf])
    order = torch.argsort(allr * n + allc)
    crow = torch.zeros(n + 1, dtype=torch.int64)
    crow[1:] = torch.cumsum(torch.bincount(allr, minlength=n), 0)
    adj_t = torch.sparse_csr_tensor(crow, allc[order], allv[order], (n, n)).to(dev)
    ei = torch.stack([ix, rows]).to(dev)

    class Pyg(torch.nn.Module):
        def __init__(self, normalize: bool):
            super().__init__()
            dims = [f] + [d] * (L - 1) + [c]
            self.convs = torch.nn.ModuleList(GCNConv(dims[i], dims[i + 1], cached=True, normalize=normalize)
                                             for i in range(L))

        def forward(self, h, adj):
            for i, conv in enumerate(self.convs):
                h = conv(Fn.dropout(h, 0.5, self.training), adj)
                if i < L - 1:
                    h = h.relu()
            return h

    for label, adj, normalize in (("pyg_adj_t", adj_t, False), ("pyg_edge_index", ei, True)):
        pm = Pyg(normalize).to(dev)
        popt = torch.optim.Adam(pm.parameters(), lr=1e-3)

        def step(ep, pm=pm, popt=popt, adj=adj):
            popt.zero_grad()
            Fn.cross_entropy(pm(x, adj)[train], y[train]).backward()
            popt.step()
        device.reset_peak_memory(dev)
        try:
            res[f"{label}_s"] = _epoch_time(step, dev, epochs)
            res[f"{label}_peak_gpu_mb"] = peak_mb(dev)
            log(f"   {label}: {res[f'{label}_s']:.4f} s/epoch, peak {res[f'{label}_peak_gpu_mb']} MiB")
        except Exception as e:  # noqa: BLE001 - a PyG path that fails is reported
            res[f"{label}_error"] = f"{type(e).__name__}: {e}"[:500]
            log(f"   {label}: {res[f'{label}_error']}")
        del pm, popt
    if dev.type == "cuda":
        torch.cuda.empty_cache()

    # roofline: the device's measured rates
    big = torch.empty(256 * 2**20 // 4, device=dev)
    bw = _rate(lambda: big.clone(), 2 * big.numel() * 4, dev)  # bytes read + written per second
    del big
    h = torch.randn(n, d, device=dev)
    w = torch.randn(d, d, device=dev)
    gemm = _rate(lambda: h @ w, 2.0 * n * d * d, dev)
    a1 = torch.sparse_csr_tensor(ip, ix, torch.ones(nnz), (n, n)).to(dev)
    spmm = _rate(lambda: torch.sparse.mm(a1, h), 2.0 * nnz * d, dev)
    del h, w, a1
    res.update(copy_bw_gbs=bw / 1e9, gemm_tflops=gemm / 1e12, spmm_gflops=spmm / 1e9)
    # per epoch: forward + both backward products of L-1 hidden GEMMs and the input one
    # (3x), SpMM in forward and backward (the first layer's input needs no gradient), and
    # the element-wise passes (dropout, relu, bias, Adam) as bytes at copy bandwidth.
    gemm_fl = 3 * (2.0 * n * f * d + 2.0 * n * d * d * (L - 2) + 2.0 * n * d * c)
    spmm_fl = 2 * 2.0 * nnz * d * (L - 1) + 2 * 2.0 * nnz * c
    elem_bytes = 4.0 * n * d * L * 10  # ~10 reads/writes of each activation per layer, fwd + bwd
    res["roofline_s"] = gemm_fl / gemm + spmm_fl / spmm + elem_bytes / bw
    best_pyg = min(v for k, v in res.items() if k in ("pyg_adj_t_s", "pyg_edge_index_s"))
    res["ratio_vs_pyg_fastest"] = res["gnnpipe_s"] / best_pyg
    res["ratio_vs_roofline"] = res["gnnpipe_s"] / res["roofline_s"]
    res["ok"] = res["ratio_vs_pyg_fastest"] <= 1.0 and res["ratio_vs_roofline"] <= 2.0
    log(f"   rates: copy {bw / 1e9:.0f} GB/s, GEMM {gemm / 1e12:.1f} TFLOP/s, SpMM {spmm / 1e9:.0f} GFLOP/s; "
        f"roofline {res['roofline_s']:.4f} s; gnnpipe / PyG fastest {res['ratio_vs_pyg_fastest']:.2f}, "
        f"/ roofline {res['ratio_vs_roofline']:.2f}")
    return res


def _kernel_table(step, dev: torch.device, path: Path, title: str) -> list[dict]:
    """One epoch under torch.profiler: the 25 costliest kernels (self time on the device)
    into ``path``; the top 8 returned for the JSON."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    with profile(activities=acts) as prof:
        step(99)
        device.synchronize(dev)
    ka = prof.key_averages()
    key = "self_cpu_time_total"
    if dev.type == "cuda":
        key = "self_device_time_total" if hasattr(ka[0], "self_device_time_total") else "self_cuda_time_total"
    path.write_text(f"# {title}: one epoch, sorted by {key}\n" + ka.table(sort_by=key, row_limit=25) + "\n")
    rows = sorted(ka, key=lambda e: getattr(e, key), reverse=True)[:8]
    return [{"name": e.key[:80], "self_ms": round(getattr(e, key) / 1e3, 3), "calls": e.count} for e in rows]


@part("profile")
def gpu_profile(dev: torch.device, small: bool, out: Path) -> dict:
    from gnnpipe.cost import calibrate as cal
    from gnnpipe.cost.profile import profile_toml

    prof, comments = cal.calibrate_device(dev, quick=small, say=lambda line: log(f"   {line}"))
    (out / "gpu_profile.toml").write_text(profile_toml(prof, comments))
    fig = {k: getattr(prof, k) for k in ("gemm_flops_s", "spmm_edge_width_s", "mem_bytes_s", "unit_overhead_s",
                                          "gather_bytes_s", "chunk_overhead_s", "dropout_values_s", "base_mem_bytes")}
    log(f"   {prof.name}: " + ", ".join(f"{k} {v:.3g}" for k, v in fig.items()))
    return {"name": prof.name, **fig, "fit": [c.strip() for c in comments if "measured" in c and "modelled" in c]}


@part("pytest")
def cuda_tests(dev: torch.device, out: Path) -> dict:
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "cuda", "-p", "no:cacheprovider", "tests/test_cuda.py"]
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env, cwd=REPO)
    (out / "pytest_cuda.log").write_text(p.stdout + p.stderr)
    last = (p.stdout.strip().splitlines() or [""])[-1]
    log(f"   pytest -m cuda: rc {p.returncode}: {last}")
    # on a GPU every test must pass; on the CPU dry run they skip, saying so
    return {"ok": p.returncode == 0 or (dev.type == "cpu" and "skipped" in last), "rc": p.returncode, "summary": last}


def report(out: Path, quiet: bool = False) -> None:
    (out / "gpu_check.json").write_text(json.dumps(RESULTS, indent=2) + "\n")
    lines = [f"# gpu_check {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", ""]
    for name, r in RESULTS.items():
        lines.append(f"- **{name}**: {'ok' if r.get('ok') else 'FAILED'} ({r.get('seconds')} s)"
                     + (f" — {r['error']}" if "error" in r else ""))
    (out / "gpu_check.md").write_text("\n".join(lines) + "\n")
    if not quiet:
        print("\n".join(lines))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "results/gpu_check"))
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--small", action="store_true", help="tiny sizes: the CPU dry run")
    ap.add_argument("--ranks", nargs="*", default=None,
                    help="the multi-rank runs to do, e.g. graph2 hybrid4 (default: graph2 graph4 pipeline2 "
                         "pipeline4 hybrid4)")
    ap.add_argument("--only", nargs="*", default=["env", "exact", "speed", "profile", "ranks", "pytest"])
    a = ap.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    OUT.append(out)
    dev = torch.device("cuda", 0) if a.device == "cuda" else torch.device("cpu")
    if dev.type == "cuda" and not torch.cuda.is_available():
        print("gpu_check: no CUDA device here; use --device cpu --small for the dry run", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="gpu-check-"))
    try:
        if "env" in a.only:
            env(dev)
        if "exact" in a.only:
            exact(dev, a.small)
        if "speed" in a.only:
            speed(dev, a.small, out)
        if "profile" in a.only:
            gpu_profile(dev, a.small, out)
        if "ranks" in a.only:
            ranks(dev, a.small, tmp, a.ranks)
        if "pytest" in a.only:
            cuda_tests(dev, out)
    finally:
        report(out)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if all(r.get("ok") for r in RESULTS.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
