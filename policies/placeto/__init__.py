"""Placeto (Addanki et al., NeurIPS 2019): one node placed per step with message passing
over the DAG (:mod:`.policy`), its RLlib module and REINFORCE learner."""
