"""Search without learning at the same measurement budget: random search and simulated
annealing (:mod:`.local`), and refit, the exact solver on a profile refitted to every
measurement (:mod:`.refit`)."""
