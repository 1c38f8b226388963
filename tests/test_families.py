"""Graph families: deterministic graphs, a split that holds out whole families, split optima."""
import numpy as np
import pytest

from envs.multi_graph import MultiGraphEnv
from hsdag_core.errors import GraphError
from hsdag_core.families import (FAMILIES, FAMILY_DEVICES, Family, FamilyGraph, family_devices,
                                     family_profile, get_family)
from hsdag_core.coarsening import build_graph
from hsdag_core.device_profile import cost_graph


def test_generated_graphs_are_deterministic():
    for spec in ("gen:layered:n=12:c=16:w=4:seed=3", "gen:cell:cells=2:b=4:c=16:seed=7"):
        _, a, ca, _ = build_graph(spec, "colocation")
        _, b, cb, _ = build_graph(spec, "colocation")
        assert a.num_nodes == b.num_nodes and np.array_equal(ca.edge_index(), cb.edge_index())
        assert [n.flops for n in ca.nodes] == [n.flops for n in cb.nodes]
        assert [n.weight_bytes for n in ca.nodes] == [n.weight_bytes for n in cb.nodes]
    _, x, _, _ = build_graph("gen:layered:n=12:c=16:w=4:seed=3")
    _, y, _, _ = build_graph("gen:layered:n=12:c=16:w=4:seed=4")
    assert [n.flops for n in x.nodes] != [n.flops for n in y.nodes]


def test_every_split_holds_out_whole_families():
    for fam in FAMILIES.values():
        trained = {g.group for g in fam.train}
        assert fam.held_out and fam.train
        assert not trained & {g.group for g in fam.held_out}, fam.name
        assert not {g.spec for g in fam.train} & {g.spec for g in fam.held_out}
    real = get_family("real")
    assert "resnet50" in {g.spec for g in real.held_out}
    assert not any("resnet" in g.spec or "resnext" in g.spec for g in real.train)
    # the wider family tests the same held-out graphs after twice the training architectures,
    # transformers among them (the real family trains on one, GPT-2)
    wide = get_family("real-wide")
    assert wide.held_out == real.held_out and set(real.train) < set(wide.train)
    assert len(wide.train) >= 2 * len(real.train)
    assert sum(g.spec.startswith("hf:") or "vit" in g.spec or "swin" in g.spec for g in wide.train) >= 5
    # real-sizes: the same architectures as real-wide, more of them at other sizes
    sizes = get_family("real-sizes")
    assert sizes.held_out == real.held_out and set(wide.train) < set(sizes.train)
    assert {g.group for g in sizes.train} == {g.group for g in wide.train}
    with pytest.raises(ValueError, match="both trained on and held out"):
        Family("bad", "", train=(FamilyGraph("resnet50", "resnet"),),
               held_out=(FamilyGraph("tv:resnet18", "resnet"),))


def test_bad_specs_are_one_sentence():
    with pytest.raises(GraphError, match="unknown graph family"):
        get_family("nope")
    with pytest.raises(GraphError, match="needs n="):
        build_graph("gen:layered:c=4")
    with pytest.raises(GraphError, match="unknown generated model kind"):
        build_graph("gen:blob:n=3")


def test_family_profile_makes_the_optimum_a_split():
    from policies.solvers.exact import solve

    _, _, g, _ = build_graph("gen:layered:n=20:c=32:w=8:seed=0", "colocation")
    cg = cost_graph(g, family_profile(g), list(FAMILY_DEVICES))
    assert cg.mem_capacity[1] == pytest.approx(0.5 * cg.mem_bytes.sum())
    res = solve(cg, "sequential", "milp", time_limit=30)
    assert res.feasible and 0 < int(res.placement.sum()) < g.num_nodes


def test_the_npu_like_accelerator_splits_a_graph_by_its_ops_without_a_memory_limit():
    """NPU_MODEL: no memory limit, yet on a held-out layered graph the optimum runs some
    nodes on the CPU and is faster than either device alone (no repair decides it)."""
    from envs.simulator import Simulator
    from policies.solvers.exact import solve

    _, _, g, _ = build_graph("gen:layered:n=30:c=32:w=3:seed=100", "colocation")
    cg = cost_graph(g, family_profile(g, accelerator="NPU_MODEL"), family_devices("NPU_MODEL"))
    assert np.isinf(cg.mem_capacity).all()
    res = solve(cg, "sequential", "milp", time_limit=30)
    assert res.feasible and 0 < int(res.placement.sum()) < g.num_nodes
    sim = Simulator(cg)
    singles = [sim.sequential(np.full(g.num_nodes, d)).value for d in range(2)]
    assert min(singles) > 1.05 * res.value
    with pytest.raises(GraphError, match="unknown family accelerator 'TPU'"):
        family_devices("TPU")


def test_multi_graph_env_draws_graphs_with_their_own_stores():
    from hsdag_ray.run.config import TrainConfig
    from hsdag_ray.run.pretraining import family_graph_configs

    # without the incumbent (pre-training's default) a graph's store holds its steps only
    cfgs = family_graph_configs(TrainConfig.of(episode_len=2, incumbent_prior=0.0), "tiny", "train", None)
    env = MultiGraphEnv({"graphs": cfgs, "seed": 1})
    sizes = {e.graph.num_nodes for e in env.envs}
    assert env.max_nodes == max(sizes) and env.observation_space["x"].shape[0] == env.max_nodes
    seen = []
    for _ in range(12):
        obs, info = env.reset(seed=5)  # RLlib's repeated seed must not pin one graph
        seen.append(info["graph"])
        assert obs["node_mask"].sum() == env.graph.num_nodes
        _, _, term, _, info = env.step(np.zeros(env.max_nodes, dtype=np.int64))
        assert info["graph"] == seen[-1] and np.isfinite(info["latency_s"])
    assert len(set(seen)) >= 3
    stats = env.graph_stats()
    assert sum(s["placements"] for s in stats) == 12
    assert all(s["placements"] == seen.count(k) for k, s in enumerate(stats))
