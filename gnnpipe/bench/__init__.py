"""``gnnpipe-bench``: the benchmarks that reproduce the paper's experiments (floor 5).

Each subcommand (:mod:`gnnpipe.bench.cli`) runs configurations through the same
:func:`gnnpipe.train.train` that ``gnnpipe-train`` runs, under the venv's ``mpirun``, reads
the per-epoch metrics and writes into ``<out>/<sub>/`` (``<out>/<sub>-quick/`` with
``--quick``; nothing outside ``<out>``)::

    results.csv      one row per configuration (or per run)
    results.json     the same rows plus the settings and a summary
    summary.md       the short markdown table printed at the end
    *.png            plots (matplotlib, Agg backend; one palette, :mod:`gnnpipe.bench.common`)

Every row carries the load average and core count before and after its cell
(``load1_before``, ``load1_after``, ``cpu_count``, ``under_load``).

Subcommands: ``comm`` (bytes per epoch, measured against predicted), ``epoch`` (time with
its compute / communication / bubble breakdown, against the cost model and the planner),
``memory`` (peak RSS per rank against the memory model), ``scale`` (synthetic graphs up
to 1M nodes / 20M edges), ``overhead`` (one process against PyG), ``accuracy`` (the
paper's protocol; long), and ``report`` (docs/benchmarks.md's tables from the stored
results, on request). ``--quick`` shrinks each to about a minute.
"""
