"""Device sets as inputs: families of sets, scale-free features, one network for any set."""
from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from hsdag_core.coarsening import build_graph
from hsdag_core.device_profile import cost_graph
from hsdag_core.device_sets import (DEVICE_FEATURES, DEVICE_SET_SPLITS, PAIR_FEATURES, DeviceSet,
                                    device_features, device_set_profile, device_sets, draw_device_set,
                                    pair_features)
from policies.gdp.device_net import DeviceGDPNet
from policies.gdp.device_training import (fastest_per_node, finetune, imitate, make_problem, zero_shot)
from policies.gdp.policy import GDPConfig

ROOT = Path(__file__).resolve().parents[1]
SPEC = "gen:layered:n=20:c=32:w=4:seed=3"


@pytest.fixture(scope="module")
def graph():
    return build_graph(SPEC, "colocation")[2]


def test_sets_are_drawn_from_fixed_disjoint_splits():
    train, held = device_sets("train", 12), device_sets("held_out", 12)
    assert [s.name for s in train] == [s.name for s in device_sets("train", 12)]  # deterministic
    assert not set(DEVICE_SET_SPLITS["train"]) & set(DEVICE_SET_SPLITS["held_out"])
    assert {s.size for s in train + held} == {2, 3, 4}
    for s in train + held:
        assert s.devices[0] == "HOST" and np.isinf(s.memory_fraction[0])
        assert len(set(s.devices)) == s.size
    from hsdag_core.device_sets import MEMORY_FRACTIONS, WIDE_MEMORY_FRACTIONS

    wide = device_sets("wide", 12)
    assert not {s.name for s in wide} & {s.name for s in train + held}
    for s in train + held:
        assert {f for f in s.memory_fraction if np.isfinite(f)} <= set(MEMORY_FRACTIONS)
    assert {f for s in wide for f in s.memory_fraction if np.isfinite(f)} <= set(WIDE_MEMORY_FRACTIONS)
    with pytest.raises(ValueError, match="unknown device-set split"):
        device_sets("test", 1)


def test_profile_gives_limited_devices_their_share_of_the_weights(graph):
    devset = next(s for s in device_sets("train", 40) if any(np.isfinite(s.memory_fraction)))
    costs = cost_graph(graph, device_set_profile(graph, devset))
    weights = float(np.sum(costs.mem_bytes))
    for k, frac in enumerate(devset.memory_fraction):
        expected = frac * weights if np.isfinite(frac) else np.inf
        assert costs.mem_capacity[k] == pytest.approx(expected)


def _scaled(devset: DeviceSet, h: float) -> DeviceSet:
    return replace(devset, specs=tuple(s.scaled(h) for s in devset.specs))


def test_features_are_scale_free(graph):
    """Every device twice as fast (math, memory, launches, links) looks the same."""
    devset = draw_device_set(7)
    a = cost_graph(graph, device_set_profile(graph, devset, boundary_s=0.0))
    b = cost_graph(graph, device_set_profile(graph, _scaled(devset, 2.0), boundary_s=0.0))
    assert np.allclose(device_features(a), device_features(b), atol=1e-5)
    assert np.allclose(pair_features(a), pair_features(b), atol=1e-5)
    assert device_features(a).shape == (devset.size, len(DEVICE_FEATURES))
    assert pair_features(a).shape == (graph.num_nodes, devset.size, len(PAIR_FEATURES))


def test_features_tell_fast_from_slow_devices(graph):
    devset = draw_device_set(3)
    slow = replace(devset, specs=(devset.specs[0].scaled(0.25),) + devset.specs[1:])
    fast = device_features(cost_graph(graph, device_set_profile(graph, devset)))
    slowed = device_features(cost_graph(graph, device_set_profile(graph, slow)))
    col = DEVICE_FEATURES.index("log_time_vs_fastest")
    assert slowed[0, col] > fast[0, col]
    assert pair_features(cost_graph(graph, device_set_profile(graph, slow)))[:, 0, 0].mean() > 0


def _net(p, seed=0):
    torch.manual_seed(seed)
    return DeviceGDPNet(p.x.shape[1], GDPConfig(hidden_dim=32))


def test_one_network_places_on_two_three_and_four_devices_equivariantly(graph):
    """The same weights score any set; reordering the devices reorders the logits."""
    by_size = {}
    for s in device_sets("held_out", 30):
        by_size.setdefault(s.size, s)
    probs = {k: make_problem(graph, s, None) for k, s in by_size.items()}
    net = _net(probs[2])
    for k, p in probs.items():
        logits = net(p.x, p.edge_index, p.device_x, p.pair_x)
        assert logits.shape == (graph.num_nodes, k)
        perm = torch.randperm(k)
        permuted = net(p.x, p.edge_index, p.device_x[perm], p.pair_x[:, perm])
        assert torch.allclose(permuted, logits[:, perm], atol=1e-5)


def test_imitation_learns_the_teacher_and_a_run_keeps_its_budget(graph):
    devset = next(s for s in device_sets("train", 40)
                  if s.size == 3 and any(np.isfinite(s.memory_fraction)))
    p = make_problem(graph, devset, 5.0)
    assert p.teacher is not None and p.teacher_s <= p.best_single_s + 1e-12
    net = _net(p)
    losses = imitate(net, [p], 150, lr=3e-3)
    assert losses[-1] < 0.3 * losses[0]
    placement, latency = zero_shot(net, p)
    assert (placement == p.teacher).mean() > 0.9
    assert latency == pytest.approx(p.teacher_s, rel=0.05)
    run = finetune(_net(p, 1), p, budget=10, greedy_first=False)
    assert run["measured"] == 10  # exactly the budget, never more
    assert run["latency_s"] <= p.best_single_s
    assert p.measured() == 0  # the run's cache is not left behind
    _, rule = fastest_per_node(p)
    assert rule >= p.teacher_s * (1 - 1e-9)


@pytest.mark.slow
def test_bench_quick_runs_end_to_end(tmp_path):
    """The documented check, verbatim but for the folder."""
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_device_sets.py"), "--quick",
                          "--out", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    md = (tmp_path / "results.md").read_text()
    assert "| all |" in md and "zero-shot" in md
    assert (tmp_path / "device_gdp.pt").exists()


def test_bench_says_what_is_wrong_with_a_bad_family():
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_device_sets.py"), "--family", "nope"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2
    assert "unknown graph family 'nope'" in out.stderr and "Traceback" not in out.stderr


def test_a_proposal_that_repairs_to_a_measured_placement_costs_no_measurement(graph):
    """The problem's cache is keyed by the placement measured (the repair), as every run's is
    (envs.measurer): all on a device that holds part of the weights repairs to a placement
    that, proposed next, is answered from the cache."""
    from hsdag_core.fit import repair

    devset = next(s for s in device_sets("train", 40)
                  if any(np.isfinite(f) and f < 1 for f in s.memory_fraction))
    p = make_problem(graph, devset, None)
    small = next(d for d, f in enumerate(devset.memory_fraction) if np.isfinite(f) and f < 1)
    over = np.full(graph.num_nodes, small)
    fixed = repair(p.costs, over)
    assert fixed is not None and not np.array_equal(fixed, over)
    assert p.latency(over) == p.latency(fixed) < np.inf and p.measured() == 1
    p.limit = 1  # the budget spent: a new placement is not measured, a cached one still answered
    host = np.zeros(graph.num_nodes, dtype=np.int64)  # all on the host, which holds everything
    assert not np.array_equal(host, fixed) and np.isnan(p.latency(host))
    assert p.latency(fixed) < np.inf and p.measured() == 1
