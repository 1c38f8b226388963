"""Exact and algorithmic placements computed from a cost graph: the solver registry
(:mod:`.exact`), min cut, MILP, the DP over ideals, HEFT, single-device and random-sample
baselines, lower bounds, and the solvers as ``train --method`` rows (:mod:`.methods`)."""
