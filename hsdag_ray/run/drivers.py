"""What moves a run forward one iteration, for each approach of a method (learning, search, solver).

Every driver has the same small interface, so :func:`hsdag_ray.run.training.train`
runs the same loop (budget, metrics, checkpoints, outputs) whatever the
method: ``iterate()`` proposes and measures one iteration's placements (they
land in the run's measurement store) and returns the method's own metrics;
``save(folder)`` / ``restore(folder)`` checkpoint it; ``stop()`` releases it;
``handle`` is what ``on_iteration`` callbacks receive; ``done`` says the method has
nothing more to propose (a solver after its one placement). Each is built from the run
resolved once (:class:`hsdag_ray.run.resolved_run.ResolvedRun`: its settings, method, backend,
environment settings and measuring resources) and the driver's copy of the environment.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import numpy as np

from hsdag_ray.run.algos import algo_config
from hsdag_ray.run.config import MEASURE_RESOURCE, TrainConfig
from hsdag_ray.run.resolved_run import ResolvedRun
from policies.registry import load

__all__ = ["RLDriver", "SearchDriver", "SolverDriver", "make_driver"]


def _num(v) -> Optional[float]:
    try:
        return None if v is None else float(v)
    except (TypeError, ValueError):
        return None


class RLDriver:
    """A learned method: one RLlib training iteration per ``iterate()``."""

    #: whether the method has nothing more to propose (the run then stops)
    done = False

    def __init__(self, run: ResolvedRun, env, singles: Optional[dict] = None) -> None:
        cfg, method = run.cfg, run.method
        prior = -1
        if cfg.learning.start == "best_single" and singles:
            lat = [singles.get(d, float("inf")) for d in env.devices]
            if min(lat) < float("inf"):
                prior = int(np.argmin(lat))
        self.algo = algo_config(run.method_settings(prior), method, run.env_config, run.real,
                                env.steps_per_episode, prior_device=prior,
                                resources=run.resources).build_algo()
        if cfg.run.init:  # fine-tuning a pre-trained policy: its weights before the first update
            from hsdag_ray.run.pretrained import init_soften_factor, load_into_algo

            load_into_algo(self.algo, run.ckpt, method.name, init_soften_factor(cfg, method))
        if cfg.guide.imitate_steps > 0:  # DOPPLER's start: imitate the profile's exact placement
            self._imitate(cfg, env)

    def _imitate(self, cfg: TrainConfig, env) -> None:
        """``--imitate-steps``: the learner's policy imitates the exact placement on the
        run's profile (:func:`policies.imitate.imitate`, no measurement), then every
        sampling copy receives its weights."""
        from ray.rllib.core import DEFAULT_MODULE_ID

        from policies.imitate import imitate

        module = self.algo.learner_group._learner.module[DEFAULT_MODULE_ID]
        self.imitation = imitate(module, [env], cfg.guide.imitate_steps, lr=cfg.learning.lr,
                                 seed=cfg.run.seed)
        self.algo.env_runner_group.sync_weights(from_worker_or_learner_group=self.algo.learner_group,
                                                inference_only=True)

    @property
    def handle(self):
        return self.algo

    def iterate(self) -> dict[str, Optional[float]]:
        result = self.algo.train()
        learner = result.get("learners", {}).get("default_policy", {})
        return {k: _num(learner.get(k)) for k in ("entropy", "num_groups", "policy_loss")}

    def save(self, folder: Path) -> None:
        # RLlib takes paths as URIs: an absolute path is a local file system path
        self.algo.save_to_path(str(Path(folder).resolve()))

    def restore(self, folder: Path) -> None:
        try:
            self.algo.restore_from_path(str(Path(folder).resolve()))
        except (ModuleNotFoundError, AttributeError) as e:
            # RLlib's checkpoint names the classes it pickled: those of an earlier layout
            from hsdag_ray.cli import UsageError

            raise UsageError(f"the checkpoint in {folder} names code this version does not have "
                             f"({e}); it was written by an earlier version: start the run afresh "
                             "(its outputs so far stay in the folder)") from None

    def stop(self) -> None:
        self.algo.stop()


class SearchDriver:
    """A search without learning (:mod:`policies.search.local`): ``episode_len``
    placements per iteration, proposed one at a time and measured through the
    run's store on a measuring machine (a Ray actor holding a measuring slot
    with a real backend)."""

    #: whether the method has nothing more to propose (the run then stops)
    done = False

    def __init__(self, run: ResolvedRun, env) -> None:
        from envs.incumbent import start_placement
        from envs.measuring_service import call, measuring_service

        cfg, method, env_cfg = run.cfg, run.method, run.env_config
        self.cfg = cfg
        self.graph_id = env.graph_id
        self.store = None
        if env_cfg.get("suggestions") and env_cfg.get("store"):
            from envs.store import StoreClient

            self.store = StoreClient.connect(env_cfg["store"])
        self.service = measuring_service(env_cfg, run.real, run.resources or {MEASURE_RESOURCE: 1},
                                         tracked=True)
        # where HSDAG's incumbent prior starts too: the fastest single device, or with a
        # profile of every device the repaired single-device placement estimated fastest
        singles = call(self.service, "single_devices")
        start = start_placement(env.graph.num_nodes, env.devices, singles,
                                getattr(env, "repair_limits", None))
        if start is None:
            start = np.zeros(env.graph.num_nodes, dtype=np.int64)
        elif (run.starts_exact or cfg.guide.etf_start) and env_cfg.get("store"):
            start = self._faster_than_measured(start, env_cfg["store"])
        costs = {}
        if method.costs:  # a search that reads the run's profile (checked by train before)
            from envs.baselines import profile_costs

            costs = {"costs": profile_costs(env), "objective": cfg.env.objective}
        self.search = load(method.run)(env.graph.num_nodes, len(env.devices), cfg.run.budget,
                                       seed=cfg.run.seed, start=start, **costs)
        if method.costs:  # it models the costs: the single devices measured before it teach it
            for name, latency in singles.items():
                if name not in env.devices:
                    continue
                k = env.devices.index(name)
                self.search.observe(np.full(env.graph.num_nodes, k, dtype=np.int64), latency,
                                    proposed=False)

    def _faster_than_measured(self, start: np.ndarray, store: str) -> np.ndarray:
        """With ``--exact-start`` (or ``--etf-start``) the run has measured the exact solver's
        (m-ETF's) placement on its profile: the start is measured too (once, counted, as HSDAG's is) and the search
        begins from the faster of the two."""
        from envs.measuring_service import call
        from envs.store import StoreClient

        best = StoreClient.connect(store).best()
        if best is None:
            return start
        [latency] = call(self.service, "measure_batch", [start.tolist()])
        return start if latency <= best["latency_s"] else np.asarray(best["placement"], dtype=np.int64)

    @property
    def handle(self):
        return self.search

    def _measure_suggestion(self) -> None:
        """With a guide (``--guide``, ``--neighbour-every``, ``--refit-every``): measure the
        placement it queued in the run's store, if any, as the search's own observation."""
        from envs.measuring_service import call

        p = self.store.take_suggestion(self.graph_id)
        if p is not None:
            [latency] = call(self.service, "measure_batch", [p], suggested=True)
            self.search.observe(np.asarray(p, dtype=np.int64), latency)

    def iterate(self) -> dict[str, Optional[float]]:
        from envs.measuring_service import call

        for _ in range(self.cfg.learning.episode_len):
            if self.store is not None:
                self._measure_suggestion()
            p = self.search.propose()
            [latency] = call(self.service, "measure_batch", [p.tolist()])
            self.search.observe(p, latency)
        return {}

    def save(self, folder: Path) -> None:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "search.json").write_text(json.dumps(self.search.state_dict()))

    def restore(self, folder: Path) -> None:
        self.search.load_state_dict(json.loads((Path(folder) / "search.json").read_text()))

    def stop(self) -> None:
        from envs.measuring_service import release

        release(self.service)


class SolverDriver:
    """An exact or algorithmic solver (:mod:`policies.solvers.methods`): its placement of
    the run's profile, measured once through the run's store; then the run is done."""

    #: whether the method has nothing more to propose (the run then stops)
    done = False

    def __init__(self, run: ResolvedRun, env) -> None:
        from envs.measuring_service import measuring_service
        from envs.baselines import profile_costs

        cfg, method = run.cfg, run.method
        self.cfg, self.method = cfg, method
        self.service = measuring_service(run.env_config, run.real,
                                         run.resources or {MEASURE_RESOURCE: 1}, tracked=True)
        # checked by train before (hsdag_ray.run.resolve.unmet_needs): a profile of every device
        self.placement = load(method.run)(profile_costs(env), cfg.env.objective,
                                          time_limit=cfg.run.solver_time_limit)

    @property
    def handle(self):
        return self.placement

    def iterate(self) -> dict[str, Optional[float]]:
        from envs.measuring_service import call
        from hsdag_ray.cli import RunError

        if self.placement is None:
            raise RunError(f"--method {self.method.name} found no placement for the "
                           f"{self.cfg.env.objective} objective on the run's profile; use another "
                           "method or objective")
        call(self.service, "measure_batch", [self.placement.tolist()])
        self.done = True
        return {}

    def save(self, folder: Path) -> None:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "solver.json").write_text(json.dumps({"done": self.done}))

    def restore(self, folder: Path) -> None:
        self.done = bool(json.loads((Path(folder) / "solver.json").read_text())["done"])

    def stop(self) -> None:
        from envs.measuring_service import release

        release(self.service)


def make_driver(run: ResolvedRun, env, singles: Optional[dict] = None):
    """The driver of the run's method's approach (``budget`` 0: zero-shot placement with
    ``init``); ``singles``: each device's single-device latency (where a learned method may
    start its sampling). With a real backend each measuring actor asks for
    ``run.resources`` (:func:`hsdag_ray.run.nodes.measuring_resources`)."""
    method = run.method
    if run.cfg.run.budget == 0:
        from hsdag_ray.run.pretrained import ZeroShotDriver

        return ZeroShotDriver(run, env)
    if method.approach == "rl":
        return RLDriver(run, env, singles)
    if method.approach == "search":
        return SearchDriver(run, env)
    if method.approach == "solver":
        return SolverDriver(run, env)
    raise ValueError(f"method {method.name}: no driver for approach {method.approach!r}")
