"""What the tests share that is not a test: functions that run inside ranks (``rankfns``,
``wirefns``, ``devicefns``, started by ``gnnpipe.spawn.run_ranks`` as
``"helpers.rankfns:many"``), the one-process oracles (``oracle``), the stand-in device
(``fake_device``), emulated hosts (``netns``) and saved tensors (``saved``).

Imported as ``helpers.<module>``: pytest puts ``tests/`` on ``sys.path`` (it has no
``__init__.py``), and rank processes get it through ``PYTHONPATH``.
"""
