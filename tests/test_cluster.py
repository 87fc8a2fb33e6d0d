"""The emulated cluster (:mod:`gnnpipe.cluster`) and ``gnnpipe-bench cluster``.

Without root: the ``ip``/``tc`` command lists (pure functions), the tear-down after an
exception or a failed set-up (the system calls faked), the benchmark's pure parts and plot.

With root (``netns``): a 4-host cluster at 100 Mbit/s per host trains a tiny graph in
graph and pipeline mode, and the bytes ``metrics.jsonl`` measured equal
:func:`gnnpipe.cost.predict`'s to the byte; the shaping really limits a TCP stream; hydra's
mpirun reaches across the namespaces; SIGINT and SIGTERM of the CLI leave nothing behind;
one sweep cell writes its outputs. After each, no namespace of this process remains.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gnnpipe import GnnpipeError
from gnnpipe import cluster as CL
from gnnpipe.bench import cluster as BC
from gnnpipe.bench import common as C
from gnnpipe.cost import ModelSpec, chunk_counts, graph_stats_from_graph, load_profile, predict

REPO = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------- pure parts
def test_parse_rate_and_delay():
    assert CL.parse_rate("200mbit") == 200_000_000
    assert CL.parse_rate("1gbit") == 10**9
    assert CL.parse_rate("500kbit") == 500_000
    assert CL.parse_rate("2.5mbit") == 2_500_000
    for none in (None, "", "0", "unshaped"):
        assert CL.parse_rate(none) is None
    for bad in ("fast", "-3mbit", "10mbyte", "0mbit"):
        with pytest.raises(CL.ClusterError, match="200mbit"):
            CL.parse_rate(bad)
    assert CL.rate_text(200_000_000) == "200mbit" and CL.rate_text(None) == "unshaped"
    assert CL.rate_text(CL.parse_rate("1500kbit")) == "1500kbit"
    assert CL.parse_delay("1ms") == 1.0 and CL.parse_delay("500us") == 0.5 and CL.parse_delay(None) is None
    with pytest.raises(CL.ClusterError, match="1ms"):
        CL.parse_delay("soon")
    assert isinstance(CL.ClusterError("x"), GnnpipeError)


def test_spec_names_and_validation():
    a, b = CL.ClusterSpec(3, ranks_per_host=2), CL.ClusterSpec(3)
    assert a.tag != b.tag and a.tag.startswith(f"{os.getpid()}-")  # pid + counter: no collisions
    assert a.namespaces == [a.switch, a.ns(0), a.ns(1), a.ns(2)]
    assert all(n.startswith(CL.PREFIX) for n in a.namespaces)
    assert [a.addr(h) for h in range(3)] == ["10.201.0.1", "10.201.0.2", "10.201.0.3"]
    assert a.world == 6 and [a.host_of(r) for r in range(6)] == [0, 0, 1, 1, 2, 2]
    for kw, field in (({"hosts": 0}, "hosts"), ({"hosts": 2, "ranks_per_host": 0}, "ranks_per_host"),
                      ({"hosts": 2, "rate_bps": -1}, "rate_bps"), ({"hosts": 2, "tag": "a b"}, "tag")):
        with pytest.raises(CL.ClusterError, match=field):
            CL.ClusterSpec(**kw)


def test_shape_commands():
    assert CL.shape_commands("ns", "eth0", None, None) == []
    rate = CL.shape_commands("ns", "eth0", 100_000_000, None)
    assert rate == [
        ["tc", "-n", "ns", "qdisc", "add", "dev", "eth0", "root", "handle", "1:", "htb", "default", "10"],
        ["tc", "-n", "ns", "class", "add", "dev", "eth0", "parent", "1:", "classid", "1:10", "htb",
         "rate", "100000000bit", "ceil", "100000000bit", "quantum", "60000"]]
    both = CL.shape_commands("ns", "eth0", 100_000_000, 1.5)
    assert both[:2] == rate
    assert both[2] == ["tc", "-n", "ns", "qdisc", "add", "dev", "eth0", "parent", "1:10", "handle", "10:",
                       "netem", "delay", "1.5ms", "limit", "100000"]
    only_delay = CL.shape_commands("ns", "eth0", None, 2.0)
    assert len(only_delay) == 1 and only_delay[0][7:] == ["root", "handle", "1:", "netem", "delay", "2ms",
                                                          "limit", "100000"]


@pytest.mark.parametrize("hosts,rate,delay", [(1, None, None), (4, 100_000_000, None), (3, 50_000_000, 1.0)])
def test_setup_commands(hosts, rate, delay):
    spec = CL.ClusterSpec(hosts, rate, delay)
    cmds = CL.setup_commands(spec)
    made: list[str] = []
    for c in cmds:
        if c[:3] == ["ip", "netns", "add"]:
            made.append(c[3])
            continue
        # Everything else runs inside a namespace made before it: the machine's own
        # interfaces are never touched.
        assert c[1] == "-n" and c[2] in made, c
        if "netns" in c:  # a veth's host end goes straight into a namespace of ours
            assert c[c.index("netns") + 1] in made, c
    assert made == spec.namespaces
    sw = spec.switch
    assert ["ip", "-n", sw, "link", "add", "name", "br0", "type", "bridge"] in cmds
    for h in range(hosts):
        ns, port = spec.ns(h), spec.port(h)
        assert ["ip", "-n", sw, "link", "add", "name", port, "type", "veth", "peer", "name", "eth0", "netns", ns] in cmds
        assert ["ip", "-n", sw, "link", "set", port, "master", "br0"] in cmds
        assert ["ip", "-n", ns, "addr", "add", f"10.201.0.{h + 1}/24", "dev", "eth0"] in cmds
        # Both directions: egress of the host's end (upload) and of the switch's end (download).
        for where, dev in ((ns, "eth0"), (sw, port)):
            for sc in CL.shape_commands(where, dev, rate, delay):
                assert sc in cmds
    n_tc = sum(c[0] == "tc" for c in cmds)
    assert n_tc == 2 * hosts * len(CL.shape_commands("x", "y", rate, delay))


def test_teardown_commands_and_ours():
    spec = CL.ClusterSpec(3)
    cmds = CL.teardown_commands(spec.namespaces)
    assert sorted(c[3] for c in cmds) == sorted(spec.namespaces)
    assert all(c[:3] == ["ip", "netns", "del"] for c in cmds)
    assert cmds[-1][3] == spec.switch  # hosts first
    dead = 2**22 + 12345  # above pid_max's default: no such process
    names = [f"gnpc-{os.getpid()}-0-h0", f"gnpc-{dead}-0-sw", "gnptest-1-a", "other", f"gnpc-{dead}-1-h3"]
    assert CL.ours(names) == [f"gnpc-{dead}-0-sw", f"gnpc-{dead}-1-h3"]  # a live owner is spared
    assert CL.ours(names, only_dead=False) == [names[0], names[1], names[4]]


class FakeSystem:
    """Stands in for ``ip``: keeps the set of namespaces, fails on a chosen command."""

    def __init__(self, fail_on: str | None = None):
        self.ns: set[str] = set()
        self.log: list[list[str]] = []
        self.fail_on = fail_on

    def __call__(self, cmd, check=True):
        cmd = list(cmd)
        self.log.append(cmd)
        out, rc = "", 0
        if self.fail_on and self.fail_on in " ".join(cmd):
            rc = 2
        elif cmd[:3] == ["ip", "netns", "add"]:
            self.ns.add(cmd[3])
        elif cmd[:3] == ["ip", "netns", "del"]:
            self.ns.discard(cmd[3])
        elif cmd[:3] == ["ip", "netns", "list"]:
            out = "\n".join(f"{n} (id: 1)" for n in sorted(self.ns))
        r = subprocess.CompletedProcess(cmd, rc, out, "RTNETLINK answers: faked failure" if rc else "")
        if check and rc:
            raise CL.ClusterError(f"{' '.join(cmd)} failed: {r.stderr}")
        return r


def test_teardown_after_exception_in_context(monkeypatch):
    fake = FakeSystem()
    monkeypatch.setattr(CL, "_run", fake)
    old_term = signal.getsignal(signal.SIGTERM)
    spec = CL.ClusterSpec(4, 100_000_000)
    with pytest.raises(RuntimeError, match="boom"):
        with CL.Cluster(spec) as c:
            assert fake.ns == set(spec.namespaces)
            assert c in CL._live and signal.getsignal(signal.SIGTERM) is CL._terminate
            c.exec_script()  # a temporary file that must go too
            tmp = c._tmp
            raise RuntimeError("boom")
    assert fake.ns == set()
    assert [cmd[3] for cmd in fake.log if cmd[:3] == ["ip", "netns", "del"]][-1] == spec.switch
    assert c not in CL._live and signal.getsignal(signal.SIGTERM) is old_term
    assert not tmp.exists()
    c.close()  # twice is harmless


def test_failed_setup_removes_what_was_made(monkeypatch):
    spec = CL.ClusterSpec(3, 50_000_000)
    fake = FakeSystem(fail_on=f"link add name {spec.port(1)}")
    monkeypatch.setattr(CL, "_run", fake)
    with pytest.raises(CL.ClusterError, match="faked failure"):
        CL.Cluster(spec).open()
    made = [cmd[3] for cmd in fake.log if cmd[:3] == ["ip", "netns", "add"]]
    assert made == [spec.switch, spec.ns(0), spec.ns(1)]
    assert fake.ns == set() and not CL._live


def test_rank_env_matches_detect_launch():
    from gnnpipe.comm import detect_launch

    c = CL.Cluster(CL.ClusterSpec(2, ranks_per_host=2))
    env = c.rank_env(3)
    info = detect_launch(env)
    assert (info.rank, info.world_size, info.local_rank, info.local_world_size, info.launcher) == (3, 4, 1, 2, "torchrun")
    assert env["MASTER_ADDR"] == "10.201.0.1" and env["GLOO_SOCKET_IFNAME"] == "eth0"
    assert c.exec_prefix(1) == ["ip", "netns", "exec", c.spec.ns(1)]
    argv = c.mpirun_argv(["python", "-c", "pass"], mpirun="mpirun")
    assert argv[:4] == c.exec_prefix(0) and argv[-3:] == ["python", "-c", "pass"]
    assert argv[argv.index("-hosts") + 1] == "10.201.0.1:2,10.201.0.2:2"
    assert argv[argv.index("UCX_TLS") + 1] == "tcp,self"  # else UCX bypasses the link through shm
    script = c.exec_script().read_text()
    assert f"10.201.0.2) ns={c.spec.ns(1)} ;;" in script
    c.close()


# ----------------------------------------------------------------------------- bench parts
def test_bench_pure_parts(tmp_path):
    assert BC.mode_flags("graph", 4) == ["--mode", "graph"]
    assert BC.mode_flags("pipeline", 4) == ["--mode", "pipeline", "--stages", "4", "--chunks", "16"]
    assert BC.mode_flags("hybrid", 4) == ["--mode", "hybrid", "--ways", "2", "--stages", "2", "--chunks", "8"]
    with pytest.raises(CL.ClusterError, match="even world"):
        BC.mode_flags("hybrid", 3)
    with pytest.raises(CL.ClusterError, match="mode must be"):
        BC.mode_flags("model", 4)
    cells = BC.sweep_cells(["50mbit", "unshaped"], ["graph", "pipeline"], ["tiny"], ["gcn", "gcnii"])
    assert len(cells) == 8 and cells[0]["rate_bps"] == 50_000_000 and cells[-1]["rate"] == "unshaped"
    with pytest.raises(CL.ClusterError, match="graph must be one of"):
        BC.sweep_cells(["50mbit"], ["graph"], ["nope"], ["gcn"])
    recs = [{"epoch_time_s": 9.0, "compute_s": 5, "comm_s": 4, "bubble_s": 0, "bytes_sent": {"halo_fwd": 1}},
            {"epoch_time_s": 2.0, "compute_s": 1, "comm_s": 1, "bubble_s": 0.5, "bytes_sent": {"halo_fwd": 10}},
            {"epoch_time_s": 4.0, "compute_s": 3, "comm_s": 1, "bubble_s": 0.5,
             "bytes_sent": {"halo_fwd": 10, "halo_bwd": 10, "allreduce": 3, "control": 7}}]
    s = BC.epoch_summary(recs)
    assert s["epoch_s"] == 3.0 and s["compute_s"] == 2.0 and s["epochs"] == 2  # first epoch left out
    assert s["bytes_train"] == 23  # control traffic is not training
    with pytest.raises(CL.ClusterError, match="no epochs"):
        BC.epoch_summary([])
    pts = {"graph": [(25, 4.0), (100, 2.0), (400, 1.0)], "pipeline": [(25, 2.0), (100, 1.5), (400, 1.5)]}
    assert BC.crossovers(pts) == [pytest.approx(200.0)]
    rows = [{"graph": g, "model": "gcn", "mode": m, "rate_bps": r, "epoch_s": 1.0 + (m == "graph") * 1e8 / (r or 1e10)}
            for g in ("a", "b") for m in ("graph", "pipeline") for r in (25_000_000, 100_000_000, None)]
    rows.append({"graph": "a", "model": "gcn", "mode": "hybrid", "rate_bps": None, "error": "failed"})
    seen = []
    png = BC.plot(rows, tmp_path / "p.png", predict=lambda r, bps: seen.append(bps) or 1.2)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and None in seen
    assert "failed" in BC.summarize([{"rate": "unshaped", "error": "x"}])


def test_sweep_wire_cells_and_speed_up_over_float32_graph(tmp_path):
    cells = BC.sweep_cells(["50mbit"], ["graph", "pipeline"], ["tiny"], ["gcn"], ["float32", "int8"])
    assert [(c["mode"], c["wire"]) for c in cells] == [("graph", "float32"), ("graph", "int8"),
                                                      ("pipeline", "float32"), ("pipeline", "int8")]
    with pytest.raises(CL.ClusterError, match="wire format must be one of"):
        BC.sweep_cells(["50mbit"], ["graph"], ["tiny"], ["gcn"], ["int3"])
    common = {"graph": "tiny", "model": "gcn", "rate": "50mbit", "rate_bps": 50_000_000, "compute_s": 1.0,
              "comm_s": 1.0, "bubble_s": 0.0, "bytes_train": 2**20, "load1_before": 0.1, "load1_after": 0.2, "cores": 2}
    rows = [dict(common, mode="graph", wire="float32", epoch_s=4.0), dict(common, mode="graph", wire="int8", epoch_s=2.0),
            dict(common, mode="pipeline", wire="int8", epoch_s=1.0)]
    line = {tuple(c.strip() for c in ln.split("|")[3:5]): ln for ln in BC.summarize(rows).splitlines()[2:]}
    assert "| 1.00 |" in line[("graph", "float32")] and "| 2.00 |" in line[("graph", "int8")]
    assert "| 4.00 |" in line[("pipeline", "int8")]  # G f32 4.0 s / 1.0 s
    assert BC.plot(rows, tmp_path / "w.png").read_bytes()[:4] == b"\x89PNG"


def test_score_planner_counts_first_choices_and_25_percent_cells():
    common = {"model": "gcn", "wire": "float32", "compute_s": 1.0, "comm_s": 1.0, "bubble_s": 0.0}
    rows = [
        # 50mbit: pipeline fastest, the model agrees; 1 of 2 predictions within 25 %
        dict(common, graph="g", rate="50mbit", rate_bps=50_000_000, mode="graph", epoch_s=4.0),
        dict(common, graph="g", rate="50mbit", rate_bps=50_000_000, mode="pipeline", epoch_s=1.0),
        # unshaped: graph fastest, the model picks the pipeline
        dict(common, graph="g", rate="unshaped", rate_bps=None, mode="graph", epoch_s=1.0),
        dict(common, graph="g", rate="unshaped", rate_bps=None, mode="pipeline", epoch_s=1.2),
        dict(common, graph="g", rate="unshaped", rate_bps=None, mode="hybrid", error="failed"),
    ]
    pred = {("50mbit", "graph"): 2.0, ("50mbit", "pipeline"): 1.1, ("unshaped", "graph"): 1.1,
            ("unshaped", "pipeline"): 0.5}
    md, counts = BC.score_planner(rows, lambda r, bps: pred[(r["rate"], r["mode"])])
    assert counts == {"groups": 2, "hits": 1, "cells": 4, "within_25": 2, "wins": {"graph": 1, "pipeline": 1}}
    assert "in 1 of 2 groups" in md and "within 25 % of the measured in 2 of 4 cells" in md
    assert "| g | gcn | unshaped | float32 | graph | pipeline | ✗ |" in md


def test_score_wire_choice_margin_budget_and_regret():
    common = {"graph": "g", "model": "gcn", "compute_s": 1.0, "comm_s": 1.0, "bubble_s": 0.0}
    cell = lambda rate, mode, wire, t: dict(common, rate=rate, rate_bps=1, mode=mode, wire=wire, epoch_s=t)  # noqa: E731
    rows = [
        # slow link: int8 predicted and measured fastest -> a hit, lossy chosen
        cell("50mbit", "graph", "float32", 4.0), cell("50mbit", "graph", "int8", 1.5),
        cell("50mbit", "pipeline", "float32", 2.0), cell("50mbit", "pipeline", "int8", 1.0),
        # int4 is measured fastest but outside the default accuracy budget: not a candidate
        cell("50mbit", "pipeline", "int4", 0.5),
        # fast link: int8 predicted 3 % faster, inside the 5 % margin -> float32 chosen;
        # measured, int8 was 10 % faster: a miss with regret 1.10
        cell("unshaped", "graph", "float32", 1.1), cell("unshaped", "graph", "int8", 1.0),
        # one wire format only: no group
        cell("1gbit", "graph", "float32", 1.0), cell("1gbit", "pipeline", "float32", 1.0),
    ]
    pred = {("50mbit", "graph", "float32"): 4.0, ("50mbit", "graph", "int8"): 1.4,
            ("50mbit", "pipeline", "float32"): 2.0, ("50mbit", "pipeline", "int8"): 0.9,
            ("50mbit", "pipeline", "int4"): 0.1, ("unshaped", "graph", "float32"): 1.00,
            ("unshaped", "graph", "int8"): 0.97, ("1gbit", "graph", "float32"): 1.0,
            ("1gbit", "pipeline", "float32"): 1.0}
    fn = lambda r, bps: pred[(r["rate"], r["mode"], r["wire"])]  # noqa: E731
    md, counts = BC.score_wire_choice(rows, fn)
    assert counts == {"groups": 2, "hits": 1, "lossy_chosen": 1, "regret": pytest.approx(1.1)}
    assert "| g | gcn | 50mbit | pipeline int8 | 1.000 | pipeline int8 | 1.000 | 1.00 | pipeline 2.000 |" in md
    assert "| g | gcn | unshaped | graph int8 | 1.000 | graph float32 | 1.100 | 1.10 | graph 1.100 |" in md
    assert md.startswith("Wire choice (formats within the planner's accuracy budget: float32, bfloat16, int8;")
    # a budget of 1 point lets int4 in: now the fastest and chosen at 50 Mbit/s
    md, counts = BC.score_wire_choice(rows, fn, accuracy_budget=1.0)
    assert "| g | gcn | 50mbit | pipeline int4 | 0.500 | pipeline int4 | 0.500 | 1.00 |" in md
    # and score_planner carries the section when a sweep has several formats
    assert "wire" in BC.score_planner(rows, fn)[1]
    assert BC.score_wire_choice([r for r in rows if r["wire"] == "float32"], fn) == ("", {})


def test_sweep_sample_cells_and_the_planners_sampling_choice(tmp_path):
    """--samples 1,0.1: graph and hybrid cells run with every row and with 10 %, the pipeline
    once; planner.md scores the planner's (mode, fraction) under the accuracy budget: SAGE-4
    may sample (measured loss 0), GCNII-32 may not (13.67 points), so its choice is among
    the every-row cells."""
    cells = BC.sweep_cells(["50mbit"], ["graph", "pipeline", "hybrid"], ["tiny"], ["sage"], samples=[1.0, 0.1])
    assert [(c["mode"], c["sample"]) for c in cells] == [("graph", 1.0), ("graph", 0.1), ("pipeline", 1.0),
                                                        ("hybrid", 1.0), ("hybrid", 0.1)]
    assert BC._cell_name(cells[1], 4) == "tiny-sage4-graph+p0.1-50mbit"
    args = BC._cell_args(cells[1], 4, 16, 3, 4, [])
    assert args[args.index("--boundary-sample") + 1] == "0.1" and "--boundary-sample" not in BC._cell_args(
        cells[0], 4, 16, 3, 4, [])
    for bad in (0.0, 1.5):
        with pytest.raises(CL.ClusterError, match="boundary-sample fraction must be in"):
            BC.sweep_cells(["50mbit"], ["graph"], ["tiny"], ["sage"], samples=[bad])
    with pytest.raises(GnnpipeError, match="--samples '1,x'"):
        BC._fractions("1,x")
    common = {"graph": "g", "rate": "50mbit", "rate_bps": 1, "wire": "float32", "hidden": 16, "compute_s": 1.0, "comm_s": 1.0,
              "bubble_s": 0.0, "bytes_train": 2**20, "load1_before": 0.1, "load1_after": 0.2, "cores": 2}

    def cell(model, layers, mode, sample, t):
        return dict(common, model=model, layers=layers, mode=mode, sample=sample, epoch_s=t)

    rows = [cell("sage", 4, "graph", 1.0, 4.0), cell("sage", 4, "graph", 0.1, 2.0), cell("sage", 4, "pipeline", 1.0, 2.3),
            cell("gcnii", 32, "graph", 1.0, 11.7), cell("gcnii", 32, "graph", 0.1, 2.1),
            cell("gcnii", 32, "pipeline", 1.0, 2.5)]
    pred = {("sage", "graph", 1.0): 4.0, ("sage", "graph", 0.1): 1.9, ("sage", "pipeline", 1.0): 1.95,
            ("gcnii", "graph", 1.0): 11.0, ("gcnii", "graph", 0.1): 2.0, ("gcnii", "pipeline", 1.0): 2.4}
    fn = lambda r, bps: pred[(r["model"], r["mode"], r["sample"])]  # noqa: E731
    md, counts = BC.score_sample_choice(rows, fn)
    # SAGE-4: graph P=0.1 predicted 1.9 s but ranks as 1.995 against the pipeline's 1.95: the
    # pipeline is chosen, measured 2.3 s against the sampled graph's 2.0 (a miss, 1.15x)
    assert "| g | sage | 50mbit | float32 | graph P=0.1 | 2.000 | pipeline P=1 | 2.300 | 1.15 | pipeline 2.300 |" in md
    # GCNII-32: sampling refused by the budget; the pipeline is chosen and fastest of the rest
    assert "| g | gcnii | 50mbit | float32 | pipeline P=1 | 2.500 | pipeline P=1 | 2.500 | 1.00 |" in md
    assert counts == {"groups": 2, "hits": 1, "sampled_chosen": 0, "refused": 1, "regret": pytest.approx(2.3 / 2.0)}
    # a refused group left with one every-row cell has no choice to score: no row, no refusal counted
    lone = rows + [dict(cell("gcnii", 32, "graph", 1.0, 3.0), rate="unshaped"),
                   dict(cell("gcnii", 32, "graph", 0.1, 2.9), rate="unshaped")]
    md_lone, counts_lone = BC.score_sample_choice(lone, fn)
    assert counts_lone == counts and "unshaped" not in md_lone
    # a budget that admits 13.67 points lets GCNII-32 sample: now chosen and fastest there
    md, counts = BC.score_sample_choice(rows, fn, accuracy_budget=20.0)
    assert "| g | gcnii | 50mbit | float32 | graph P=0.1 | 2.100 | graph P=0.1 | 2.100 | 1.00 |" in md
    assert counts["sampled_chosen"] == 1 and counts["refused"] == 0
    # the planner section and the summary tell the fractions apart; no sampled cell: no section
    md, counts = BC.score_planner(rows, fn)
    assert "sample" in counts and "| g | sage | 50mbit | float32 | pipeline | pipeline | ✓ |" in md  # P=1 cells only
    assert "| graph | float32 P=0.1 | 50mbit | 2.000 |" in BC.summarize(rows)
    assert BC.score_sample_choice([r for r in rows if r["sample"] == 1.0], fn) == ("", {})
    assert BC.plot(rows, tmp_path / "s.png").read_bytes()[:4] == b"\x89PNG"


def test_cli_lists_cluster_and_needs_train_args(capsys):
    from gnnpipe.bench.cli import main

    assert main(["cluster", "--hosts", "2"]) == 2
    assert "after '--'" in capsys.readouterr().err
    assert main(["--quick", "cluster"]) == 2
    assert "put it first" in capsys.readouterr().err


# ----------------------------------------------------------------------------- with root
SMALL = ["--dataset", "sbm", "--synth-nodes", "600", "--synth-features", "8", "--synth-classes", "4",
         "--model", "gcn", "--layers", "4", "--hidden", "16", "--eval-every", "1000", "--threads", "1",
         "--timeout", "60", "--seed", "0"]


@pytest.fixture(scope="module")
def root_ok():
    why = CL.unavailable()
    if why is not None:
        pytest.skip(f"the emulated cluster needs root and iproute2: {why}")
    yield
    assert _mine() == [], "namespaces left behind"


def _mine() -> list[str]:
    return [n for n in CL.list_namespaces() if n.startswith(f"{CL.PREFIX}{os.getpid()}-")]


def _predicted(mode: str, world: int = 4) -> dict[str, int]:
    from gnnpipe.config import TrainConfig
    from gnnpipe.dims import ParallelDims
    from gnnpipe.data.load import load_graph_for

    g = load_graph_for(TrainConfig(dataset="sbm", synth_nodes=600, synth_features=8, synth_classes=4))
    topo = (ParallelDims("graph", ways=world) if mode == "graph"
            else ParallelDims("pipeline", stages=world, chunks=4 * world))
    st = graph_stats_from_graph(g, [world], seed=0, chunks=chunk_counts([topo]))
    return predict(st, ModelSpec("gcn", 4, 16), topo, load_profile("cpu-this-machine")).bytes



@pytest.mark.netns
@pytest.mark.parametrize("mode,launcher", [("graph", "torch"), ("pipeline", "torch"),
                                           pytest.param("pipeline", "mpi", marks=pytest.mark.mpi)])
def test_shaped_cluster_bytes_equal_predicted(root_ok, tmp_path, mode, launcher):
    spec = CL.ClusterSpec(4, CL.parse_rate("100mbit"))
    row = BC.run_job(spec, [*SMALL, *BC.mode_flags(mode, 4), "--epochs", "2"], tmp_path / "run", launcher, 240)
    assert _mine() == []
    metrics = C.read_metrics(tmp_path / "run")
    assert len(metrics) == 2 and row["world"] == 4 and row["rate"] == "100mbit"
    p = _predicted(mode)
    for rec in metrics:  # every epoch sends the same, to the byte
        m = C.measured_bytes(rec)
        assert (m["halo"], m["pipe"], m["allreduce"]) == (p["halo"], p["pipe"], p["allreduce"]), (m, p)
    assert (p["halo"] > 0) == (mode == "graph") and (p["pipe"] > 0) == (mode == "pipeline")
    assert row["epoch_s"] > 0 and row["cores"] >= 1 and json.loads((tmp_path / "run" / "cell.json").read_text())


_STREAM = """
import socket, sys, time
host, n = sys.argv[1], int(sys.argv[2])
if host == "serve":
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", 5001)); s.listen(); c, _ = s.accept(); got = 0; t0 = None
    while True:
        d = c.recv(1 << 20)
        if not d: break
        t0 = t0 or time.monotonic(); got += len(d)
    print(got * 8 / (time.monotonic() - t0))
else:
    s = socket.create_connection((host, 5001)); b = b"x" * (1 << 20)
    for _ in range(n): s.sendall(b)
    s.close()
"""


@pytest.mark.netns
def test_shaping_limits_a_tcp_stream(root_ok):
    # 50 Mbit/s on each host's link: a 10 MiB stream from host 1 to host 0 crosses host 1's
    # upload and host 0's download, each shaped; TCP gets close to, never above, the rate.
    with CL.Cluster(CL.ClusterSpec(2, CL.parse_rate("50mbit"))) as c:
        srv = subprocess.Popen(c.exec_prefix(0) + [sys.executable, "-c", _STREAM, "serve", "0"],
                               stdout=subprocess.PIPE, text=True)
        time.sleep(1.0)
        subprocess.run(c.exec_prefix(1) + [sys.executable, "-c", _STREAM, c.spec.addr(0), "10"], check=True, timeout=60)
        bps = float(srv.communicate(timeout=60)[0])
    assert 0.7 * 50e6 < bps < 1.05 * 50e6, f"{bps / 1e6:.1f} Mbit/s on a 50 Mbit/s link"
    assert _mine() == []


@pytest.mark.netns
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_mid_run_leaves_nothing(root_ok, tmp_path, sig):
    cmd = [sys.executable, "-m", "gnnpipe.bench.cli", "cluster", "--hosts", "2", "--rate", "50mbit",
           "--out", str(tmp_path / "run"), "--", *SMALL, "--mode", "graph", "--epochs", "100000"]
    # SIGINT back to its default, so that Python turns it into KeyboardInterrupt even when
    # this test runs in the background (which ignores it), as a terminal's Ctrl-C would.
    p = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    prefix = f"{CL.PREFIX}{p.pid}-"
    deadline = time.monotonic() + 120
    metrics = tmp_path / "run" / "metrics.jsonl"
    while not (metrics.exists() and metrics.read_text().count("\n") >= 1):
        assert time.monotonic() < deadline and p.poll() is None, p.communicate()[0][-3000:]
        time.sleep(0.1)
    ours = [n for n in CL.list_namespaces() if n.startswith(prefix)]
    assert len(ours) == 3
    ranks = [int(x) for n in ours for x in subprocess.run(["ip", "netns", "pids", n], capture_output=True,
                                                          text=True).stdout.split()]
    assert len(ranks) == 2
    p.send_signal(sig)
    out = p.communicate(timeout=60)[0]
    assert p.returncode != 0, out[-2000:]
    assert [n for n in CL.list_namespaces() if n.startswith(prefix)] == [], out[-2000:]
    for r in ranks:
        assert not Path(f"/proc/{r}").exists(), f"rank process {r} survived"


@pytest.mark.netns
def test_cleanup_removes_leftovers_of_dead_runs(root_ok):
    # A SIGKILLed run leaves its namespaces: cleanup removes them, and spares live ones.
    dead = subprocess.Popen(["true"])
    dead.wait()
    spec = CL.ClusterSpec(2, tag=f"{dead.pid}-0")
    for cmd in CL.setup_commands(spec):
        CL._run(cmd)
    try:
        with CL.Cluster(CL.ClusterSpec(1)) as live:
            gone = CL.cleanup()
            assert set(spec.namespaces) <= set(gone) and live.spec.switch not in gone
            assert live.spec.switch in CL.list_namespaces()
    finally:
        CL.remove(spec.namespaces)
    assert not set(spec.namespaces) & set(CL.list_namespaces())


@pytest.mark.netns
def test_sweep_one_cell_writes_outputs(root_ok, tmp_path):
    rows, d = BC.sweep(tmp_path, rates=["100mbit"], modes=["graph"], graphs=["tiny"], models=["gcn"],
                       hosts=2, layers=2, hidden=8, epochs=2, extra=["--threads", "1", "--timeout", "60"],
                       network="quick")
    assert len(rows) == 1 and "error" not in rows[0], rows
    r = rows[0]
    # the link was measured before the cell, written whole, and carried by the row
    fit = json.loads((d / "network" / "100mbit.json").read_text())
    assert fit["hosts"] == 2 and fit["rate_bps"] == 100_000_000 and fit["p2p"] and fit["a2a"]
    assert r["network"]["bw_bytes_s"] == fit["bw_bytes_s"] and 0.5 * 12.5e6 < fit["bw_bytes_s"] < 1.05 * 12.5e6
    assert r["rate_bps"] == 100_000_000 and r["epoch_s"] > 0 and r["bytes"]["halo_fwd"] > 0
    assert {"load1_before", "load1_after", "cores", "compute_s", "comm_s", "bubble_s"} <= set(r)
    for f in ("rows.jsonl", "results.csv", "results.json", "summary.md", "epoch_vs_rate.png"):
        assert (d / f).exists(), f
    assert json.loads((d / "rows.jsonl").read_text().splitlines()[0])["cell"] == r["cell"]
    assert _mine() == []
