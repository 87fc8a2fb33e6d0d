"""Print the planner's graph ÷ pipeline epoch-time ratios on the paper's graphs (A5000 profile).

GNNPipe (GNNPIPE.md §4) reports pipeline faster than graph parallelism for deep models on
Squirrel and Reddit and slower on Physics (wide features). This asks the cost model the
same question with the ``a5000-100gbe`` profile, 8 ranks, 32 chunks, 32 layers, and the
graphs' published statistics; Σ M_p comes from the real METIS plan where the dataset is
prepared (Squirrel, Physics) and from a scaled-down R-MAT graph of Reddit's shape
otherwise. ``tests/test_plan.py`` asserts the direction; this prints the numbers quoted in
docs/benchmarks.md.

Usage: ``python scripts/paper_direction.py`` (needs Squirrel prepared under the data root,
``$GNNPIPE_DATA_ROOT`` or ``./datasets``; Physics optional).
"""

from __future__ import annotations

from gnnpipe.dims import ParallelDims
from gnnpipe.cost import (GraphStats, ModelSpec, estimate_part_info, graph_stats_from_graph, load_profile,
                          predict)
from gnnpipe.roots import data_root

ROOT = data_root()


def g_over_p(stats, spec, prof) -> float:
    g = predict(stats, spec, ParallelDims("graph", 8), prof)
    p = predict(stats, spec, ParallelDims("pipeline", 1, 8, 32), prof)
    return g.epoch_s / p.epoch_s


def main() -> None:
    from gnnpipe.data.graph import Graph

    prof = load_profile("a5000-100gbe")
    rows = []
    if (ROOT / "squirrel" / "meta.json").is_file():
        st = graph_stats_from_graph(Graph.load(ROOT / "squirrel"), [8], chunks={1: [32]})
        for m, paper in (("gcn", "2.33"), ("gcnii", "—")):
            rows.append(("squirrel", m, 1000, g_over_p(st, ModelSpec(m, 32, 1000), prof), paper))
    st = GraphStats(34493, 495924, 8415, 5, name="physics")
    if (ROOT / "coauthor_physics" / "meta.json").is_file():
        real = graph_stats_from_graph(Graph.load(ROOT / "coauthor_physics"), [8], chunks={1: [32]})
        st = st.with_parts([real.part(8), real.part(1)])
    else:
        st = st.with_parts(estimate_part_info(34493, 495924, [8], chunks={1: [32]}))
    for m, paper in (("gcn", "0.79"), ("gcnii", "0.55")):
        rows.append(("physics", m, 100, g_over_p(st, ModelSpec(m, 32, 100), prof), paper))
    st = GraphStats(232965, 114615892, 602, 41, name="reddit")
    st = st.with_parts(estimate_part_info(st.num_nodes, st.num_edges, [8], sample_nodes=5000, chunks={1: [32]}))
    rows.append(("reddit-shaped", "gcn", 100, g_over_p(st, ModelSpec("gcn", 32, 100), prof), "2.45"))
    print("| graph | model | d | graph ÷ pipeline time (model) | paper |")
    print("|---|---|---|---|---|")
    for g, m, d, r, paper in rows:
        print(f"| {g} | {m} | {d} | {r:.2f} | {paper} |")


if __name__ == "__main__":
    main()
