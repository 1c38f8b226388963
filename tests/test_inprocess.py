"""Placement methods run in one process (hsdag_ray.run.inprocess, policies.hsdag.local), on the
simulator, without Ray: HSDAG learns, refit and exact reach the optimum, the budget holds,
and nothing imports Ray, RLlib or OpenVINO.

The graphs are built here as :class:`CompGraph` s, without OpenVINO: a layered CNN like
``gen:layered`` (hsdag_core/generated.py; node ``i`` reads ``i-1`` and up to one more of the
three before it, convolutions whose spatial size halves and width doubles by stage), on a
modeled CPU and accelerator whose op times are crossed by a seeded factor per node, so
each device is faster on its own ops and the optimum is a real split.
"""
from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest

from envs.graph_backend import make_backend
from hsdag_core.compgraph import CompGraph, Edge, Node
from hsdag_core.device_profile import DeviceSpec, MODELED_DEVICES, Profile, add_modeled_device, cost_graph
from hsdag_ray.run.inprocess import PROPOSAL_CAP, run_method
from policies.solvers.exact import exact_method, solve

pytestmark = pytest.mark.ray  # runs train, sweep, pretrain or Ray itself in this process

# nothing here uses Ray: the methods run in this process (the session's shared Ray may be up)

ROOT = Path(__file__).resolve().parents[1]


def layered_cnn(n: int, c: int = 64, size: int = 32, stages: int = 3, seed: int = 0) -> CompGraph:
    """A layered DAG of ``n`` convolutions (see the module docstring), FLOPs and bytes
    computed from the shapes as hsdag_core.compgraph counts them."""
    rng = np.random.default_rng(seed)
    nodes, edges, width, side = [], [], [], []
    for i in range(n):
        stage = stages * i // n
        s, cout, k = max(1, size >> stage), int(rng.integers(c // 2, c + 1)) << stage, int(rng.choice([1, 3]))
        parents = [] if i == 0 else sorted({i - 1, int(i - 1 - rng.integers(0, min(i, 3)))})
        cin = 3 if i == 0 else sum(width[p] for p in parents)
        weights = cin * cout * k * k * 4
        nodes.append(Node(name=f"conv{i}", op_type="Convolution", ops=[f"conv{i}"],
                          output_shapes=[[1, cout, s, s]], output_types=["f32"],
                          flops=2.0 * cin * cout * k * k * s * s, bytes_read=cin * s * s * 4 + weights,
                          bytes_written=cout * s * s * 4, weight_bytes=weights))
        edges += [Edge(src=p, dst=i, port=0, shape=[1, width[p], side[p], side[p]], dtype="f32",
                       bytes=width[p] * side[p] ** 2 * 4) for p in parents]
        width.append(cout)
        side.append(s)
    return CompGraph(f"layered_cnn{n}", nodes, edges)


def crossed_profile(graph: CompGraph, accelerator_memory: float = math.inf, seed: int = 0) -> Profile:
    """CPU_MODEL and an accelerator (GPU_MODEL's link and launch cost) whose time for each
    node is the CPU's times exp(N(0, 1)); ``accelerator_memory``: the fraction of the
    graph's weights it holds."""
    prof = Profile(model=graph.name, devices={}, op_time_s={})
    add_modeled_device(prof, graph, "CPU_MODEL")
    weights = sum(node.weight_bytes for node in graph.nodes)
    spec = DeviceSpec(**{**asdict(MODELED_DEVICES["GPU_MODEL"]), "memory_bytes": accelerator_memory * weights})
    add_modeled_device(prof, graph, "ACCEL", spec)
    rng = np.random.default_rng(seed)
    for node in graph.nodes:
        prof.op_time_s["ACCEL"][node.ops[0]] = prof.op_time_s["CPU_MODEL"][node.ops[0]] * float(
            np.exp(rng.normal()))
    prof.boundary_s = 2e-4
    return prof


@pytest.fixture(scope="module")
def problem():
    """A 20-node graph, its simulator backend, costs and exact optimum (a split: neither
    single device is within 15% of it)."""
    graph = layered_cnn(20)
    prof = crossed_profile(graph)
    backend = make_backend("simulator", graph, profile=prof)
    costs = cost_graph(graph, prof, backend.devices)
    optimum = solve(costs, "sequential", exact_method(costs, "sequential"))
    assert optimum.optimal and len(set(optimum.placement.tolist())) == 2
    return graph, prof, backend, costs, optimum.value


def quiet(_: str) -> None:
    pass


@pytest.fixture
def one_thread():
    """torch on one thread, as run_method (and the training run) sets it: more threads spin
    against each other on graphs this small."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_hsdag_improves_on_its_first_iteration_or_ends_near_the_optimum(problem):
    graph, _, backend, costs, optimum = problem
    for seed in (0, 2):
        r = run_method("hsdag", graph, backend, costs, budget=100, seed=seed, say=quiet, progress=False)
        first = min(r["curve"][:20])  # the first iteration's 20 placements are all new
        assert r["latency_s"] < first or r["latency_s"] <= 1.05 * optimum, (seed, first, r["latency_s"])
        assert r["latency_s"] <= 1.10 * optimum and r["latency_s"] == min(r["curve"])
        assert r["iterations"] >= 4 and r["measured"] == len(r["curve"]) <= 100
        # what the result names is what was measured
        p = np.array([backend.devices.index(r["placement_by_name"][name]) for name in graph.names])
        assert p.tolist() == r["placement"]
        assert backend.measure_array(p).latency_s == pytest.approx(r["latency_s"], rel=1e-12)


def test_the_local_policy_samples_faster_placements_as_it_trains(problem, one_thread):
    import torch

    from hsdag_core.features import node_features
    from hsdag_ray.run.config import TrainConfig
    from hsdag_ray.run.resolve import resolved
    from policies.hsdag.local import LocalHSDAG, configs_from_settings

    graph, _, backend, costs, optimum = problem
    x, _ = node_features(graph, times_s=costs.compute_s, mem_bytes=costs.mem_bytes,
                         mem_capacity=costs.mem_capacity)
    config, learn = configs_from_settings(resolved(TrainConfig()))
    assert (config.hidden_dim, config.num_gcn_layers, config.grouping_noise) == (64, 2, 0.3)
    assert (learn.lr, learn.entropy_coeff, learn.episode_len, learn.advantages) == (1e-3, 0.01, 20, "centered")
    torch.manual_seed(0)
    agent = LocalHSDAG(x.shape[1], 2, graph.edge_index(), config, learn)
    means = []
    for _ in range(15):
        latencies = []

        def reward(p):
            latencies.append(backend.measure_array(p).latency_s)
            return 1.0 / latencies[-1]  # HSDAG's reward (inverse)

        metrics = agent.iterate(lambda: x, reward)
        means.append(float(np.mean(latencies)))
    assert agent.updates == 15 and metrics["num_groups"] >= 2
    assert np.mean(means[-3:]) < 0.95 * means[0], [round(m / optimum, 3) for m in means]
    greedy = agent.greedy(x)
    assert greedy.shape == (graph.num_nodes,) and set(greedy.tolist()) <= {0, 1}


def test_hsdag_samples_and_scores_placements_as_the_rllib_module(one_thread):
    """The same weights give the same samples (same seed) and the same logp and entropy
    in the learner's pass as policies.hsdag.module.HSDAGRLModule, with and without a
    sampled grouping or a node state."""
    pytest.importorskip("ray.rllib")
    import torch
    from ray.rllib.core.columns import Columns

    from envs.observation import pad_graph_observation, placement_spaces
    from hsdag_core.features import node_features
    from hsdag_ray.run.config import TrainConfig
    from hsdag_ray.run.resolve import resolved
    from policies.distributions import pack_dist_inputs
    from policies.hsdag.local import LocalHSDAG, configs_from_settings
    from policies.hsdag.module import GATE_PARTNER, GROUPING_PARTNER, HSDAGRLModule
    from policies.registry import get

    graph = layered_cnn(10, c=16, size=16)
    x, _ = node_features(graph)
    ei = graph.edge_index()
    obs = pad_graph_observation(x, ei, graph.num_nodes, ei.shape[1])
    spaces = placement_spaces(graph.num_nodes, ei.shape[1], x.shape[1], 2)
    for extra in ({}, {"sampled_grouping": True}, {"node_state_update": False}):
        settings = resolved(TrainConfig.of(**extra))
        config, learn = configs_from_settings(settings)
        local = LocalHSDAG(x.shape[1], 2, ei, config, learn)
        module = HSDAGRLModule(observation_space=spaces[0], action_space=spaces[1],
                               model_config=get("hsdag").model_config(settings))
        module.net.load_state_dict(local.net.state_dict())
        torch.manual_seed(3)
        episode = local.sample_episode(x)
        torch.manual_seed(3)
        state, actions = None, []
        with torch.no_grad():  # an EnvRunner's steps: exploration forward, then a sample
            for _ in range(learn.episode_len):
                batch = {Columns.OBS: {k: torch.as_tensor(v).unsqueeze(0) for k, v in obs.items()}}
                if state is not None:
                    batch[Columns.STATE_IN] = state
                out = module.forward_exploration(batch)
                state = out.get(Columns.STATE_OUT)
                dist = module.get_exploration_action_dist_cls().from_logits(out[Columns.ACTION_DIST_INPUTS])
                actions.append(dist.sample()[0])
        assert torch.equal(torch.stack(actions), episode.actions), extra

        steps = learn.episode_len
        batch = {Columns.OBS: {k: torch.as_tensor(v).expand(1, steps, *v.shape).clone() for k, v in obs.items()},
                 Columns.ACTION_DIST_INPUTS: pack_dist_inputs(torch.zeros(steps, graph.num_nodes, 2),
                                                              episode.assignment).unsqueeze(0),
                 GATE_PARTNER: episode.gate.float().unsqueeze(0)}
        if episode.partner is not None:
            batch[GROUPING_PARTNER] = episode.partner.float().unsqueeze(0)
        out = module.forward_train(batch)
        dist = module.get_train_action_dist_cls().from_logits(out[Columns.ACTION_DIST_INPUTS])
        logp = dist.logp(episode.actions.unsqueeze(0))[0] + out.get("grouping_logp", torch.zeros(1, steps))[0]
        mine, entropy, _ = local._score(episode)
        assert torch.allclose(logp, mine, atol=1e-5) and torch.allclose(dist.entropy()[0], entropy, atol=1e-5)


def test_hsdags_other_training_settings_run_in_process_too():
    """The incumbent prior (the run's best as features, the start measured first), a sampled
    grouping, replay, epochs, two episodes per update and the stall response, on an
    accelerator that holds half the weights (proposals repaired to fit)."""
    from envs.incumbent import start_placement

    graph = layered_cnn(14)
    prof = crossed_profile(graph, accelerator_memory=0.5)
    backend = make_backend("simulator", graph, profile=prof)
    costs = cost_graph(graph, prof, backend.devices)
    settings = {"incumbent_prior": 2.0, "incumbent_share": 0.5, "start": "best_single",
                "sampled_grouping": True, "replay_episodes": 2, "num_epochs": 2,
                "episodes_per_iteration": 2, "stall_patience": 1, "stall_shrink": 0.5, "advantages": "rank"}
    r = run_method("hsdag", graph, backend, costs, budget=30, seed=0, settings=settings, say=quiet,
                   progress=False)
    start = start_placement(graph.num_nodes, backend.devices, r["single_device_s"], costs)
    assert r["curve"][0] == backend.measure_array(start).latency_s  # measured before the policy's
    assert r["iterations"] >= 1 and r["measured"] <= 30 and r["failures"] == 0
    assert r["latency_s"] <= r["curve"][0]


def test_refit_and_exact_reach_the_exact_optimum(problem):
    graph, _, backend, costs, optimum = problem
    refit = run_method("refit", graph, backend, costs, budget=5, say=quiet, progress=False)
    assert refit["latency_s"] == pytest.approx(optimum, rel=1e-9) and refit["measured"] <= 5
    exact = run_method("exact", graph, backend, costs, budget=5, say=quiet, progress=False)
    assert exact["latency_s"] == pytest.approx(optimum, rel=1e-9)
    assert exact["measured"] == exact["proposed"] == 1 and exact["approach"] == "solver"


@pytest.mark.parametrize("method,budget", [("hsdag", 12), ("random", 15), ("anneal", 15)])
def test_the_budget_counts_distinct_measured_placements(problem, method, budget):
    graph, _, backend, costs, _ = problem
    r = run_method(method, graph, backend, costs, budget=budget, seed=1, say=quiet, progress=False)
    assert r["measured"] == len(r["curve"]) <= budget and r["proposed"] <= PROPOSAL_CAP * budget
    assert r["measured"] == budget or r["proposed"] == PROPOSAL_CAP * budget
    assert r["failures"] == 0 and all(math.isfinite(v) for v in r["curve"])
    again = run_method(method, graph, backend, costs, budget=budget, seed=1, say=quiet, progress=False)
    assert again["curve"] == r["curve"]  # the seed decides the run


def test_the_best_after_every_measurement_is_recorded(problem):
    """A run of 10 measurements has 10 rows of best-so-far, non-increasing, on a clock that
    only moves forward; cached repeats are not rows."""
    graph, _, backend, costs, _ = problem
    r = run_method("anneal", graph, backend, costs, budget=10, seed=3, say=quiet, progress=False)
    rows = r["best_curve"]
    assert r["measured"] == len(rows) == 10 and r["proposed"] > 10  # anneal proposes repeats
    assert [row["measurement"] for row in rows] == list(range(1, 11))
    assert [row["latency_s"] for row in rows] == r["curve"]
    assert [row["best_latency_s"] for row in rows] == list(np.minimum.accumulate(r["curve"]))
    walls = [row["wall_s"] for row in rows]
    assert walls == sorted(walls) and 0 < walls[-1] <= r["wall_s"]


def test_failures_get_the_environments_failure_reward():
    from hsdag_ray.run.config import TrainConfig
    from hsdag_ray.run.inprocess import _Measurer
    from hsdag_ray.run.resolved_run import resolve_run

    graph = layered_cnn(8, c=16, size=16)
    prof = crossed_profile(graph, accelerator_memory=0.3)
    backend = make_backend("simulator", graph, profile=prof)
    costs = cost_graph(graph, prof, backend.devices)
    everything_on_the_accelerator = np.ones(graph.num_nodes, dtype=np.int64)
    graded = _Measurer(graph, backend, costs, resolve_run(TrainConfig.of(memory_penalty="graded", budget=5), measured_by=backend))
    assert graded.reference_s == graded.single_device_s["CPU_MODEL"]
    assert graded.single_device_s["ACCEL"] == math.inf
    m = graded.take(everything_on_the_accelerator)
    assert not m.ok and m.stage == "memory"
    over = backend.memory_over(everything_on_the_accelerator)
    assert over > 0 and graded.reward_latency(m) == pytest.approx(10.0 * graded.reference_s * (1 + over))
    assert graded.reward(m) == pytest.approx(1.0 / graded.reward_latency(m))  # HSDAG's inverse
    flat = _Measurer(graph, backend, costs, resolve_run(
        TrainConfig.of(memory_penalty="flat", failure_factor=4.0, budget=5), measured_by=backend))
    assert flat.reward_latency(flat.take(everything_on_the_accelerator)) == pytest.approx(4.0 * flat.reference_s)
    # by default (repair) the proposal is moved within the limits before it is measured
    repaired = _Measurer(graph, backend, costs, resolve_run(TrainConfig.of(budget=5), measured_by=backend))
    assert repaired.take(everything_on_the_accelerator).ok
    assert repaired.take(everything_on_the_accelerator).ok and repaired.measured == 1  # cached


def test_what_runs_only_through_ray_is_refused_with_the_command_to_use(problem):
    graph, _, backend, costs, _ = problem
    with pytest.raises(ValueError, match="python -m hsdag_ray.train --method placeto"):
        run_method("placeto", graph, backend, costs, say=quiet)
    with pytest.raises(ValueError, match="costs="):
        run_method("exact", graph, backend, None, say=quiet)
    with pytest.raises(ValueError, match="'guide'"):
        run_method("hsdag", graph, backend, costs, settings={"guide": True}, say=quiet)
    with pytest.raises(ValueError, match="unknown setting 'learning_rate'"):
        run_method("hsdag", graph, backend, costs, settings={"learning_rate": 1e-3}, say=quiet)
    with pytest.raises(ValueError, match="node and segment moves"):
        run_method("hsdag", graph, backend, costs, settings={"node_moves": True}, say=quiet)


SCRIPT = """
import json, sys
import hsdag_ray.run.inprocess, policies.hsdag.local, envs.simulator
from envs.graph_backend import make_backend
from hsdag_core.compgraph import CompGraph
from hsdag_core.device_profile import Profile, cost_graph
from hsdag_ray.run.inprocess import run_method

graph, prof = CompGraph.load(sys.argv[1]), Profile.load(sys.argv[2])
backend = make_backend("simulator", graph, profile=prof)
costs = cost_graph(graph, prof, backend.devices)
out = {m: run_method(m, graph, backend, costs, budget=b, say=lambda s: None, progress=False)
       for m, b in (("hsdag", 25), ("refit", 3))}
assert "ray" not in sys.modules and "openvino" not in sys.modules and "wandb" not in sys.modules
print(json.dumps({m: [r["measured"], r["latency_s"], r.get("iterations")] for m, r in out.items()}))
"""


def test_hsdag_and_refit_run_without_importing_ray_or_openvino(tmp_path, problem):
    """A fresh process runs HSDAG (one update) and refit, and has imported neither Ray
    (nor RLlib), OpenVINO nor W&B."""
    graph, prof, _, _, optimum = problem
    graph.save(tmp_path / "graph.json")
    prof.save(tmp_path / "profile.json")
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "graph.json"),
                           str(tmp_path / "profile.json")], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["hsdag"][0] <= 25 and out["hsdag"][2] >= 1  # at least one REINFORCE update
    assert out["refit"][1] == pytest.approx(optimum, rel=1e-9)
    assert time.perf_counter() - t0 < 60
