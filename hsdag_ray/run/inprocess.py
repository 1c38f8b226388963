"""Run one placement method in this process: no Ray, OpenVINO or W&B needed.

``python -m hsdag_ray.train`` runs every method through Ray (measuring actors, RLlib's
learner). :func:`run_method` runs a registered method (:data:`policies.registry.METHODS`)
on a :class:`~hsdag_core.compgraph.CompGraph` and any :class:`envs.base.Backend` in the
calling process, with PyTorch, torch-geometric, numpy, scipy, networkx and gymnasium
(and, for a learned method other than HSDAG, RLlib's module classes; Ray is never
started):

* learned methods, on the node features :meth:`envs.placement_env.PlacementEnv._setup`
  builds (the run's :class:`~hsdag_core.features.FeatureConfig`, the profile's per-node
  times and memory when ``costs`` are given, the incumbent's one-hot devices when the
  run reads it), updated by :class:`policies.reinforce_core.ReinforceCore`, the RLlib
  learner's update: ``hsdag`` by :class:`policies.hsdag.local.LocalHSDAG` (the RLlib
  path's network, REINFORCE and defaults, without importing RLlib), every other one that
  acts in the placement environment and trains by REINFORCE (``rnn``; ``gdp`` with
  ``algo="reinforce"``) by :class:`policies.local_module.LocalModule` over its own
  RLModule and advantages. A method trained by another algorithm (GDP's PPO, its
  default) or acting in its own environment (Placeto's, one node per step) is refused
  with the command that runs it (docs/architecture.md says why);
* searches (``random``, ``anneal``, ``refit``): the classes and protocol of
  :class:`hsdag_ray.run.drivers.SearchDriver` (start, single devices taught to a search that
  reads the profile, one proposal and its measured latency at a time);
* solvers (``exact``, ``heft``, ``m-topo``, ``m-etf``, ``m-sct``): the run functions of
  :class:`hsdag_ray.run.drivers.SolverDriver`, their placement measured once.

Placements are measured by the placement environment's own measurer
(:class:`envs.measurer.Measurer`): repaired to the profile's memory limits first
(``memory_penalty="repair"`` with ``costs``), cached by the placement measured (a
placement proposed again, or one that repairs to a placement measured before, is answered
from the cache and costs nothing), and a failure rewarded as ``failure_factor`` times
the reference latency (the fastest single device, measured first outside the budget),
graded by how far it is over a memory limit. The budget counts placements measured, as
``--budget-unit measurements`` does; a run also stops after :data:`PROPOSAL_CAP` times
its budget in proposals (a settled policy proposes few new placements). A learned method
runs with torch on ``torch_threads`` threads (1, as the training run sets it: more threads spin
against each other on small graphs) and its own seeded random generator, both restored
afterwards. The run is resolved once (:func:`hsdag_ray.run.resolved_run.resolve_run`, with
``backend`` as what measures it), and its measurer, node features and learner read that
:class:`~hsdag_ray.run.resolved_run.ResolvedRun`. The search aids
(``--guide`` and the settings it turns on) are off here: every method runs as published.
"""
from __future__ import annotations

import math
import sys
import time
from typing import Any, Callable, Mapping, Optional

import numpy as np

from envs.base import Backend, Measurement
from envs.measurer import Measurer, best_curve
from envs.store import MeasurementStore, StoreClient
from hsdag_core.compgraph import CompGraph
from hsdag_core.costgraph import CostGraph

__all__ = ["run_method", "PROPOSAL_CAP"]

#: a run stops after this many times its budget in placements proposed, measured or not
#: (a training run's cap with ``--budget-unit measurements``,
#: :data:`hsdag_ray.run.training.PROPOSAL_CAP`)
PROPOSAL_CAP = 5
#: run_method's arguments, not settings
_ARGUMENTS = ("method", "budget", "seed", "objective")


class _Measurer(Measurer):
    """The run's :class:`envs.measurer.Measurer` (repair, cache, budget, measure, reward:
    the placement environment's path) over ``backend``, with a local store, the budget
    in new placements measured and :data:`PROPOSAL_CAP` times it in proposals, and the
    devices' latencies and the reference measured first, outside the budget."""

    def __init__(self, graph: CompGraph, backend: Backend, costs: Optional[CostGraph], run) -> None:
        cfg, budget = run.cfg, run.cfg.run.budget
        #: the cost graph an over-memory placement is repaired to before it is measured
        self.limits = costs if costs is not None and cfg.env.memory_penalty == "repair" else None
        super().__init__(backend, graph.name, graph.num_nodes, StoreClient(MeasurementStore()),
                         self.limits, budget=budget, proposal_cap=PROPOSAL_CAP,
                         failure_factor=cfg.env.failure_factor, memory_penalty=cfg.env.memory_penalty,
                         reward=run.reward)
        self.devices = list(backend.devices)
        _, _, self.single_device_s = self.find_reference(self.devices, "best_single", graph.name)

    def take(self, placement: Any) -> Optional[Measurement]:
        """The measurement of a proposed placement (repaired, or from the cache), or None
        when the budget is spent (a new placement) or the proposals are capped."""
        out = self.measure(placement)
        return None if out is None else out[0]


def _resolve(method: str, budget: int, seed: int, objective: str, settings: Optional[Mapping[str, Any]],
             backend: Backend, say):
    """The run resolved once (:func:`hsdag_ray.run.resolved_run.resolve_run` of its checked
    :class:`~hsdag_ray.run.config.TrainConfig`, measured by ``backend``), refusing what an
    in-process run does not do."""
    from hsdag_ray.cli import UsageError
    from hsdag_ray.run.config import TrainConfig
    from hsdag_ray.run.resolved_run import resolve_run

    settings = dict(settings or {})
    given = sorted(set(settings) & set(_ARGUMENTS))
    if given:
        raise ValueError(f"{given[0]!r} is an argument of run_method, not a setting")
    try:
        cfg = TrainConfig.of(**settings, method=method, budget=int(budget), seed=int(seed),
                             objective=objective)
    except UsageError as e:
        raise ValueError(str(e)) from None
    cfg.validate()
    if cfg.run.init or cfg.env.sim_profile:  # refused before a checkpoint or profile is read
        _needs_train("init" if cfg.run.init else "sim_profile")
    run = resolve_run(cfg, say, measured_by=backend)
    off = {"guide": cfg.run.guide, "exact_start": run.starts_exact, "etf_start": cfg.guide.etf_start,
           "neighbour_every": run.neighbour_every > 0, "refit_every": cfg.guide.refit_every > 0,
           "screen": cfg.env.screen > 0, "imitate_steps": cfg.guide.imitate_steps > 0}
    on = [name for name, value in off.items() if value]
    if on:
        _needs_train(on[0])
    return run


def _needs_train(setting: str) -> None:
    raise ValueError(f"the setting {setting!r} needs python -m hsdag_ray.train: in-process runs "
                     "run each method as published, with REINFORCE, from scratch")


def _check_learned(spec, run) -> None:
    """Refuses, in one sentence, a learned method an in-process run cannot train: one
    trained by another algorithm than REINFORCE (GDP's PPO), or one acting in its own
    environment (Placeto's node-by-node one); docs/architecture.md says why."""
    from policies.registry import Method

    algo = run.algo
    if algo != "reinforce":
        raise ValueError(f"method {spec.name!r} trains with {algo.upper()}, and in-process runs train "
                         f"by REINFORCE only: pass settings={{'algo': 'reinforce'}} or use python -m "
                         f"hsdag_ray.train --method {spec.name}")
    if spec.env != Method.env:
        raise ValueError(f"method {spec.name!r} acts in its own environment ({spec.env}), which "
                         f"in-process runs do not build: use python -m hsdag_ray.train --method "
                         f"{spec.name}")


def _features(graph: CompGraph, run, costs: Optional[CostGraph], num_devices: int) -> np.ndarray:
    """``[N, F]`` the node features :meth:`envs.placement_env.PlacementEnv._setup` builds,
    with ``D`` zero incumbent columns last when the run reads the incumbent."""
    from hsdag_core.features import node_features

    features = run.cfg.features
    times = mem = cap = None
    if costs is not None and (features.cost or features.relative):
        times, mem, cap = costs.compute_s, costs.mem_bytes, costs.mem_capacity
    x, _ = node_features(graph, features, times, mem, cap)
    if run.reads_incumbent:
        x = np.concatenate([x, np.zeros((x.shape[0], num_devices), x.dtype)], axis=1)
    return x


def _learner(spec, cfg, graph: CompGraph, num_features: int, num_devices: int):
    """The in-process learner of a learned method: HSDAG's own (its node state carried
    between steps), else :class:`policies.local_module.LocalModule` over the method's
    RLModule, with the method's advantages; both update through
    :class:`policies.reinforce_core.ReinforceCore`."""
    from policies.registry import load, reinforce_config

    if spec.name == "hsdag":
        from policies.hsdag.local import LocalHSDAG, configs_from_settings

        net_config, learn = configs_from_settings(cfg)
        return LocalHSDAG(num_features, num_devices, graph.edge_index(), net_config, learn)
    from policies.local_module import LocalModule

    learn, _ = reinforce_config(spec, cfg)
    model_config = spec.model_config(cfg) if spec.model_config else {}
    baseline = load(spec.baseline)() if spec.baseline else None
    return LocalModule(load(spec.module), num_features, num_devices, graph.edge_index(), model_config,
                       learn, baseline)


def _run_learned(run, graph: CompGraph, measurer: _Measurer, costs: Optional[CostGraph],
                 tick: Callable[[], None]) -> dict[str, Any]:
    """A learned method's iterations until the budget is spent (as
    :class:`hsdag_ray.run.drivers.RLDriver` starts it: ``--start best_single`` leans HSDAG on
    the fastest single device)."""
    from envs.incumbent import incumbent, start_placement

    cfg, n, devices, singles = run.cfg, measurer.n, measurer.devices, measurer.single_device_s
    prior = -1
    if cfg.learning.start == "best_single":
        latencies = [singles.get(d, math.inf) for d in devices]
        prior = int(np.argmin(latencies)) if min(latencies) < math.inf else -1
    x = _features(graph, run, costs, len(devices))
    agent = _learner(run.method, run.method_settings(prior), graph, x.shape[1], len(devices))
    shows = run.reads_incumbent
    start = start_placement(n, devices, singles, measurer.limits) if shows else None
    wander = np.random.default_rng(cfg.run.seed)  # which episodes see the incumbent
    first = [shows and measurer.limits is not None and start is not None]

    def observe() -> np.ndarray:
        """An episode's observation, with the incumbent as PlacementEnv.reset shows it."""
        if not shows:
            return x
        obs = x.copy()
        obs[:, -len(devices):] = 0.0
        if cfg.env.incumbent_share >= 1 or wander.random() < cfg.env.incumbent_share:
            p = incumbent(measurer.store.best(), start, devices, singles, n)
            if p is not None:
                obs[np.arange(n), x.shape[1] - len(devices) + p] = 1.0
        return obs

    def reward(placement: np.ndarray) -> Optional[float]:
        if first[0]:  # PlacementEnv._measure_start: the start, measured before the first step
            first[0] = False
            measurer.take(start)
        m = measurer.take(placement)
        tick()
        return None if m is None else measurer.reward(m)

    metrics: dict[str, float] = {}
    while (out := agent.iterate(observe, reward)) is not None:
        metrics = out
    return {"iterations": agent.updates, "last_update": metrics}


def _run_search(run, measurer: _Measurer, costs: Optional[CostGraph],
                tick: Callable[[], None]) -> dict[str, Any]:
    """A search, as :class:`hsdag_ray.run.drivers.SearchDriver` runs it, until the budget is spent."""
    from envs.incumbent import start_placement
    from policies.registry import load

    method, cfg, n, devices = run.method, run.cfg, measurer.n, measurer.devices
    start = start_placement(n, devices, measurer.single_device_s, measurer.limits)
    if start is None:
        start = np.zeros(n, dtype=np.int64)
    kw = {"costs": costs, "objective": cfg.env.objective} if method.costs else {}
    search = load(method.run)(n, len(devices), cfg.run.budget, seed=cfg.run.seed, start=start, **kw)
    if method.costs:  # it models the costs: the single devices measured before it teach it
        for name, latency in measurer.single_device_s.items():
            search.observe(np.full(n, devices.index(name), dtype=np.int64), latency, proposed=False)
    while True:
        p = search.propose()
        m = measurer.take(p)
        tick()
        if m is None:
            return {}
        search.observe(p, measurer.reward_latency(m))


def _run_solver(run, measurer: _Measurer, costs: CostGraph) -> dict[str, Any]:
    """A solver's placement of the costs, as :class:`hsdag_ray.run.drivers.SolverDriver` runs it."""
    from policies.registry import load

    method, cfg = run.method, run.cfg
    placement = load(method.run)(costs, cfg.env.objective, time_limit=cfg.run.solver_time_limit)
    if placement is None:
        raise RuntimeError(f"method {method.name} found no placement for the {cfg.env.objective} "
                           "objective on the costs; use another method or objective")
    measurer.take(placement)
    return {}


def _progress(total: int, show: Optional[bool]):
    """A tqdm bar of placements measured (None: only on a terminal, and when tqdm is there)."""
    if show is False or (show is None and not sys.stderr.isatty()):
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, unit="measured", leave=False)


def run_method(method: str, graph: CompGraph, backend: Backend, costs: Optional[CostGraph] = None,
               budget: int = 500, seed: int = 0, objective: str = "sequential",
               settings: Optional[Mapping[str, Any]] = None, say: Callable[[str], Any] = print,
               progress: Optional[bool] = None) -> dict[str, Any]:
    """Run ``method`` on ``graph`` measured by ``backend``, in this process (module docstring).

    Args:
        method: a name of :data:`policies.registry.METHODS` (learned: those the module
            docstring lists).
        graph: the graph ``backend`` measures placements of (one device index per node).
        backend: what measures a placement (``devices``, ``measure_array``).
        costs: the profile as a cost graph of ``graph`` on ``backend.devices``
            (:func:`hsdag_core.device_profile.cost_graph`): what the methods that read a
            profile read (``Method.costs``), HSDAG's cost features and the memory repair.
        budget: placements measured (new ones; the cache answers the others).
        seed: random seed of the method.
        objective: what the methods that read ``costs`` optimise (the backend measures
            with its own).
        settings: fields of :class:`hsdag_ray.run.config.TrainConfig` over its defaults (the
            training run's: lr, episode_len, hidden_dim, reward, failure_factor...).
        say: where the one-line summary goes.
        progress: a progress bar (tqdm) of the placements measured; None: on a terminal.

    Returns:
        ``method``, ``approach``, ``placement`` (the best measured, device indices, None when
        none ran), ``placement_by_name`` (node name -> device), ``latency_s`` (its latency,
        ``inf`` when none ran), ``measured``, ``proposed``, ``failures``, ``curve`` (the
        latency of every measurement in order, ``inf`` for a failure), ``best_curve``
        (the best so far after every measurement, with the wall seconds since the run
        began, its reference, planning and solving included:
        :func:`envs.measurer.best_curve`), ``wall_s``,
        ``devices``, ``single_device_s``, ``reference_s``, ``budget``, ``seed``,
        ``objective``; a learned method adds ``iterations`` and ``last_update`` (its metrics).
    """
    t0, t_wall = time.perf_counter(), time.time()
    run = _resolve(method, budget, seed, objective, settings, backend, say)
    spec, cfg = run.method, run.cfg
    if spec.approach == "rl":
        _check_learned(spec, run)
    devices = list(backend.devices)
    if costs is not None and (costs.num_nodes != graph.num_nodes or list(costs.devices) != devices):
        raise ValueError(f"costs must be those of the graph's {graph.num_nodes} nodes on the backend's "
                         f"devices {devices}; they have {costs.num_nodes} nodes on {list(costs.devices)}")
    if costs is None and (spec.costs or spec.approach == "solver"):
        raise ValueError(f"method {method!r} reads a profile of every device: pass costs="
                         "hsdag_core.device_profile.cost_graph(graph, profile, backend.devices)")
    measurer = _Measurer(graph, backend, costs, run)
    bar = _progress(cfg.run.budget, progress)

    def tick() -> None:
        if bar is not None:
            bar.update(measurer.measured - bar.n)

    try:
        if spec.approach == "rl":
            import torch

            threads = torch.get_num_threads()
            torch.set_num_threads(cfg.run.torch_threads)  # as train sets it: more spin on small graphs
            try:
                with torch.random.fork_rng(devices=[]):
                    torch.manual_seed(cfg.run.seed)
                    extra = _run_learned(run, graph, measurer, costs, tick)
            finally:
                torch.set_num_threads(threads)
        elif spec.approach == "search":
            extra = _run_search(run, measurer, costs, tick)
        else:
            extra = _run_solver(run, measurer, costs)
    finally:
        if bar is not None:
            bar.close()
    best, log = measurer.store.best(), measurer.store.log_since(0)
    placement = best["placement"] if best else None
    result = {
        "method": method, "approach": spec.approach, "placement": placement,
        "placement_by_name": None if placement is None else
        {name: devices[d] for name, d in zip(graph.names, placement)},
        "latency_s": best["latency_s"] if best else math.inf,
        "measured": measurer.measured, "proposed": measurer.proposed,
        "failures": sum(1 for e in log if not e["ok"]), "curve": [e["latency_s"] for e in log],
        "best_curve": best_curve(log, t_wall),
        "wall_s": time.perf_counter() - t0, "devices": devices,
        "single_device_s": dict(measurer.single_device_s), "reference_s": measurer.reference_s,
        "budget": cfg.run.budget, "seed": cfg.run.seed, "objective": cfg.env.objective, **extra}
    say(f"{method} on {graph.name}: best {result['latency_s'] * 1e3:.3f} ms, "
        f"{result['measured']} measured of {result['proposed']} proposed in {result['wall_s']:.1f} s")
    return result
