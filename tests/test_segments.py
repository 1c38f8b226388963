"""The sequential objective's segments heuristic: exact on a chain, and a start the MILP keeps."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from envs.simulator import Simulator
from hsdag_core.costgraph import CostGraph
from hsdag_core.dnnpart import dnnpart_from_dict, load_dnnpart
from policies.solvers.exact import solve
from policies.solvers.milp_sequential import sequential_start
from policies.solvers.segments import segments_placement, solve_segments


def _chain(seed: int, n: int = 7, accs: int = 3) -> CostGraph:
    """A chain with costly tensors, a slow CPU and accelerators whose memory binds."""
    rng = np.random.default_rng(seed)
    nodes = [{"id": i, "supportedOnFpga": 1, "cpuLatency": float(rng.uniform(1, 10)),
              "fpgaLatency": float(rng.uniform(0.1, 2)), "isBackwardNode": 0,
              "size": float(rng.uniform(1, 4))} for i in range(n)]
    edges = [{"sourceId": i, "destId": i + 1, "cost": float(rng.uniform(0, 6))} for i in range(n - 1)]
    return dnnpart_from_dict({"maxSizePerFPGA": 7.0, "maxFPGAs": accs, "maxCPUs": 1,
                              "nodes": nodes, "edges": edges})


@pytest.mark.parametrize("seed", range(3))
def test_segments_are_the_optimum_of_a_chain(seed):
    # on a chain every placement is a run of segments, and with a device for each
    # segment (five accelerators for five nodes) the dynamic program's costs are exact
    g = _chain(seed, n=5, accs=5)
    sim = Simulator(g)
    best = min(r.value for p in itertools.product(range(g.num_devices), repeat=g.num_nodes)
               if (r := sim.evaluate(np.array(p), "sequential")).feasible)
    p = segments_placement(g)
    assert sim.check(p) is None
    assert sim.evaluate(p, "sequential").value == pytest.approx(best, rel=1e-12)
    r = solve(g, "sequential", "segments", time_limit=5)
    assert r.feasible and r.value == pytest.approx(best, rel=1e-12)


def test_the_segments_method_refuses_other_objectives():
    with pytest.raises(ValueError, match="does not solve the parallel objective"):
        solve(_chain(0), "parallel", "segments")
    with pytest.raises(ValueError, match="solves the sequential objective"):
        solve_segments(_chain(0), "throughput")


def test_the_sequential_start_takes_the_segments_on_a_residual_network(benchmarks_dir):
    # ResNet-50's layers with large activations: cutting where tensors are small beats
    # alpha-expansion and Baechi's fills
    g = load_dnnpart(benchmarks_dir / "latency-inputs/LayerGraphs/resnet50_inference.json")
    sim = Simulator(g)
    seg = sim.evaluate(segments_placement(g), "sequential").value
    others = [solve(g, "sequential", m, time_limit=1).value for m in ("alpha-expansion", "m-topo", "m-etf")]
    assert seg < min(others)
    start = sequential_start(g, time_limit=1)
    assert sim.evaluate(start, "sequential").value <= seg


def test_the_segments_method_reports_the_path_bound_when_given_the_time(benchmarks_dir):
    # with memory binding and PATH_BOUND_FROM_S seconds, the gap is against the path
    # bound and the set partitioning bound computed in the time left, not against the
    # sum of every node's fastest time
    from policies.solvers.bounds import lower_bound
    from policies.solvers.path_bound import PATH_BOUND_FROM_S, sequential_bound
    g = load_dnnpart(benchmarks_dir / "latency-inputs/LayerGraphs/resnet50_inference.json")
    r = solve(g, "sequential", "segments", time_limit=PATH_BOUND_FROM_S)
    assert r.bound == pytest.approx(max(sequential_bound(g), r.info["partition_bound_s"]))
    assert lower_bound(g, "sequential") < sequential_bound(g) <= r.bound <= r.value
    quick = solve(g, "sequential", "segments", time_limit=1)
    assert quick.bound == pytest.approx(lower_bound(g, "sequential"))
