"""The layer that resolves a run once and runs it, below the ``python -m hsdag_ray.X`` commands.

The run's settings by section (``config``, ``settings``), their resolution into one frozen
run (``resolved_run``; its steps: ``resolve``), the RLlib config of a method (``algos``), a
run's start and baselines (``run_start``, ``compute_baselines``), its drivers (``drivers``),
any method in one process without Ray (``inprocess``), run folders, checkpoints and
summaries (``rundir``, ``summary``, ``plots``, ``tracking``), a sweep's trials and tables
(``sweep_trials``, ``sweep_table``, ``results``), the implicit profile of a simulator run
(``implicit_profile``), pre-trained checkpoints (``pretrained``), Ray's nodes and a
loopback-only local Ray (``nodes``, ``local_ray``). The commands parse and print
(:mod:`hsdag_ray.cli`, :mod:`hsdag_ray.flags`, :mod:`hsdag_ray.arguments`,
:mod:`hsdag_ray.console`); nothing here imports a command.
"""
