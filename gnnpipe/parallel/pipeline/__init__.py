"""The pipeline (GNNPipe's model parallelism): one stage of units per rank, chunks flowing
through the stages, historical embeddings for the neighbours not yet computed.

Read in this order (docs/architecture.md walks one chunk through them):

- :mod:`gnnpipe.schedule`: the epoch's action lists, pure data (kept on the math floor
  beside the cost model, which predicts from the same lists);
- :mod:`.history`: the history buffers H/G/S/R/GR/RS and their epoch phases;
- :mod:`.stage`: one stage's compute over a chunk: forward, backward, the whole graph;
- :mod:`.runtime`: interprets a stage's action list, moving chunk activations between
  stages.

The independent one-process oracle of the same rules is :mod:`gnnpipe.parallel.reference`.
"""
