"""The cost model and planner: bytes, time and memory per epoch for every parallel layout.

One job per module (floor 2, below the executors; ``calibrate`` sits higher, it runs ranks):

* :mod:`~gnnpipe.cost.inputs` — :class:`GraphStats`, :class:`PartInfo`, :class:`ModelSpec`.
* :mod:`~gnnpipe.cost.profile` — :class:`HardwareProfile`, :data:`PROFILE_FIELDS`,
  :func:`load_profile`, :func:`list_profiles`, the user profile directory.
* :mod:`~gnnpipe.cost.units` — per-unit work (:func:`unit_works`) and its time.
* :mod:`~gnnpipe.cost.memory` — the memory model, term by term.
* :mod:`~gnnpipe.cost.predict` — the pure prediction: :func:`predict` → :class:`Prediction`
  (its pipeline timing, :func:`~gnnpipe.cost.predict.pipeline_span`, equals
  :func:`gnnpipe.schedule.simulate`).
* :mod:`~gnnpipe.cost.planner` — feasible layouts, :func:`rank_configs`,
  :func:`train_command`, :func:`wire_choices`, :func:`sample_choices` (boundary sampling).
* :mod:`~gnnpipe.cost.wire_accuracy` — the wire formats' expected accuracy loss: the prior
  (:data:`WIRE_ACCURACY_PRIOR`) or measured runs (:func:`wire_accuracy_from_results`); and
  boundary sampling's measured loss (:data:`BOUNDARY_SAMPLE_LOSS`).
* :mod:`~gnnpipe.cost.graphstats` — statistics measured from a graph or estimated from a
  synthetic sample: the part that runs METIS.
* :mod:`~gnnpipe.cost.calibrate` — measures this machine (``gnnpipe-plan calibrate``);
  imports torch and launches ranks, so it is not imported here.

The names below are the public API (``from gnnpipe.cost import predict, ...``).
"""

from __future__ import annotations

from gnnpipe.cost.graphstats import (chunk_counts, chunk_facts, chunk_facts_of_plan, estimate_part_info,
                                     estimate_sum_m, graph_stats_from_graph, part_info_from_plan)
from gnnpipe.cost.inputs import GraphStats, ModelSpec, PartInfo
from gnnpipe.cost.planner import (CHUNK_FACTORS, DEFAULT_ACCURACY_BUDGET, WIRE_MIN_GAIN, feasible_topologies,
                                  rank_configs, rank_key, sample_choices, train_command, wire_choices)
from gnnpipe.cost.predict import Prediction, StageDetail, predict, stage_blocks
from gnnpipe.cost.profile import (PROFILE_DIR_ENV, PROFILE_FIELDS, PROFILE_OPTIONAL, HardwareProfile,
                                  list_profiles, load_profile, profile_toml, profiles_dir, user_profiles_dir,
                                  with_link)
from gnnpipe.cost.units import UnitWork, num_units, param_count, unit_works
from gnnpipe.cost.wire_accuracy import (BOUNDARY_SAMPLE_LOSS, WIRE_ACCURACY_PRIOR, WIRE_ACCURACY_SOURCE, WireAccuracy,
                                        prior_for, sample_figure)
from gnnpipe.cost.wire_accuracy import from_results as wire_accuracy_from_results

__all__ = [
    "CHUNK_FACTORS", "DEFAULT_ACCURACY_BUDGET", "PROFILE_DIR_ENV", "PROFILE_FIELDS", "PROFILE_OPTIONAL", "GraphStats", "HardwareProfile",
    "ModelSpec", "PartInfo", "Prediction", "StageDetail", "UnitWork", "chunk_counts", "chunk_facts",
    "chunk_facts_of_plan", "estimate_part_info", "estimate_sum_m", "feasible_topologies", "graph_stats_from_graph",
    "list_profiles", "load_profile", "num_units", "param_count", "part_info_from_plan", "predict",
    "profile_toml", "profiles_dir", "rank_configs", "stage_blocks", "train_command", "unit_works", "user_profiles_dir",
    "WIRE_ACCURACY_PRIOR", "WIRE_ACCURACY_SOURCE", "WIRE_MIN_GAIN", "rank_key", "wire_choices", "with_link",
    "WireAccuracy", "wire_accuracy_from_results", "prior_for", "BOUNDARY_SAMPLE_LOSS", "sample_choices", "sample_figure",
]
