"""The layer that resolves a run once and runs it, below the ``python -m hsdag_ray.X`` commands.

The run's settings by section (``config``, ``settings``), their resolution into one frozen
run (``resolved_run``; its steps: ``resolve``), the RLlib config of a method (``algos``), a
training run from its start to its summary (``training``), its start and baselines
(``run_start``, ``compute_baselines``), its drivers (``drivers``), any method in one process
without Ray (``inprocess``), run folders, checkpoints and summaries (``rundir``,
``summary``, ``plots``, ``tracking``), a sweep, its trials and tables (``sweeping``,
``sweep_trials``, ``sweep_table``, ``results``), the implicit profile of a simulator run
(``implicit_profile``), pre-training and pre-trained checkpoints (``pretraining``,
``pretrained``), Ray's nodes and a loopback-only local Ray (``nodes``, ``local_ray``).
The commands parse and print; of the top of :mod:`hsdag_ray` this layer imports only what
they share for errors, flags and printing (:mod:`hsdag_ray.cli`, :mod:`hsdag_ray.flags`,
:mod:`hsdag_ray.console`), never a command.
"""
