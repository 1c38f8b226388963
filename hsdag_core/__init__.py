"""The foundation: graphs of models, coarsening, node features, cost graphs,
profiles and the benchmark formats. It imports nothing from ``envs``,
``policies`` or the commands built on it."""
