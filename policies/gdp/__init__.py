"""GDP (Zhou et al., 2019): GraphSAGE embeddings and an attention placer that places all
nodes in one shot (:mod:`.policy`), trained with PPO through its RLlib module."""
