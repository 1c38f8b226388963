"""HSDAG (Duan et al., NeurIPS 2024): GCN embeddings, Graph-Parsing grouping into a learned
number of groups, an MLP placer (:mod:`.policy`), its settings (:mod:`.config`) and its
RLlib module (:mod:`.module`)."""
