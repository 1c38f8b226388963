"""The link fit: each device's op times calibrated to the whole model run on it,
per-crossing and per-transfer costs recovered from measured placements, and profiles
written before the fit existed priced as they always were."""
import json

import numpy as np
import pytest

from envs.profiling import calibrate_compute, fit_link_costs, uncalibrated
from envs.simulator import Simulator
from hsdag_core.compgraph import from_ov_model
from hsdag_core.device_profile import Profile, cost_graph, split_placements
from hsdag_core.models import tiny_cnn


def _graph_and_times():
    g = from_ov_model(tiny_cnn())
    rng = np.random.default_rng(3)
    times = {"A": {n: float(rng.uniform(2e-4, 2e-3)) for n in g.names},
             "B": {n: float(rng.uniform(5e-4, 6e-3)) for n in g.names}}
    return g, times


def _by_hand(g, times, p, crossing_s, latency_s, bandwidth_Bps):
    """Latency of placement ``p`` written out from the graph: every node's time on its
    device, each tensor moved to the other device once (latency + bytes / bandwidth),
    and a fixed cost at every point where execution passes to the other device."""
    devs = ["A", "B"]
    total = sum(sum(times[devs[p[i]]].get(op, 0.0) for op in n.ops) for i, n in enumerate(g.nodes))
    moved = {}
    for e in g.edges:
        if p[e.src] != p[e.dst]:
            moved[(e.src, e.port, p[e.dst])] = e.bytes
    total += sum(latency_s + b / bandwidth_Bps for b in moved.values())
    return total + crossing_s * int((p[1:] != p[:-1]).sum())


def test_fit_recovers_per_crossing_and_per_transfer_costs_from_noisy_measurements():
    """Placements crossing the link 1 to 15 times, measured with 0.1% noise: the fit finds
    the costs used to make them (the latency per tensor least surely: on this graph the
    tensors moved nearly follow the crossings)."""
    g, times = _graph_and_times()
    truth = Profile("tiny", {"A": {}, "B": {}}, times, link_latency_s=3e-4,
                    link_bandwidth_Bps=2e8, boundary_s=1.5e-3)
    sim = Simulator(cost_graph(g, truth))
    ps = split_placements(g.num_nodes, 2, 30, seed=4)
    rng = np.random.default_rng(0)
    y = [sim.sequential(p).value * (1 + 0.001 * rng.standard_normal()) for p in ps]
    prof = Profile("tiny", {"A": {}, "B": {}}, times)
    fit = fit_link_costs(g, prof, ps, y)
    assert fit["crossings"][0] == 1 and fit["crossings"][1] >= 10
    assert prof.boundary_s == pytest.approx(1.5e-3, rel=0.1)
    assert prof.link_latency_s == pytest.approx(3e-4, rel=0.5)
    assert prof.link_bandwidth_Bps == pytest.approx(2e8, rel=0.2)
    assert fit["mean_rel_error"] < 0.002 and fit["mean_rel_error_compute_only"] > 0.1
    assert fit["spearman_fitted"] > fit["spearman_compute_only"]


def test_fit_minimises_relative_errors():
    """Placements 1-20x apart in latency with 5% noise: no other non-negative costs give a
    smaller sum of squared relative errors than the fitted ones (the noise of the slowest
    placements does not outweigh the fastest)."""
    g, times = _graph_and_times()
    times["B"] = {k: 20 * v for k, v in times["A"].items()}
    truth = Profile("tiny", {"A": {}, "B": {}}, times, link_latency_s=1e-4,
                    link_bandwidth_Bps=5e8, boundary_s=5e-4)
    sim = Simulator(cost_graph(g, truth))
    ps = split_placements(g.num_nodes, 2, 24, seed=5)
    rng = np.random.default_rng(1)
    y = np.array([sim.sequential(p).value * (1 + 0.05 * rng.standard_normal()) for p in ps])
    prof = Profile("tiny", {"A": {}, "B": {}}, times)
    fit_link_costs(g, prof, ps, y)

    def relative_sse(crossing_s, latency_s, bandwidth_Bps):
        other = Profile("tiny", prof.devices, times, link_latency_s=latency_s,
                        link_bandwidth_Bps=bandwidth_Bps, boundary_s=crossing_s)
        s = Simulator(cost_graph(g, other))
        return float(np.sum(((np.array([s.sequential(p).value for p in ps]) - y) / y) ** 2))

    best = relative_sse(prof.boundary_s, prof.link_latency_s, prof.link_bandwidth_Bps)
    c, l, inv = prof.boundary_s, prof.link_latency_s, 1 / prof.link_bandwidth_Bps
    for dc, dl, dinv in [(1e-4, 0, 0), (0, 2e-5, 0), (0, 0, 2e-10), (-1e-4, 0, 0), (0, -2e-5, 0),
                         (0, 0, -2e-10)]:
        if min(c + dc, l + dl, inv + dinv) < 0:
            continue  # the fit keeps every cost >= 0
        bw = 1 / (inv + dinv) if inv + dinv > 0 else float("inf")
        assert relative_sse(c + dc, l + dl, bw) >= best - 1e-12
    assert relative_sse(5e-4, 1e-4, 5e8) >= best - 1e-12


@pytest.mark.parametrize("extra", [{}, {"link_latency_s": 2e-4, "link_bandwidth_Bps": 1e9, "boundary_s": 7e-4}])
def test_an_old_profile_json_prices_as_before(tmp_path, extra):
    """A profile file with only the fields of the first format (no pairs, memory, fit or
    source) loads, and prices every placement as compute + transfers + crossings, computed
    here from the graph by hand; without link fields the link is free."""
    g, times = _graph_and_times()
    old = {"model": "tiny", "devices": {"A": {"kind": "measured"}, "B": {"kind": "measured"}},
           "op_time_s": times, **extra}
    (tmp_path / "old.json").write_text(json.dumps(old))
    sim = Simulator(cost_graph(g, Profile.load(tmp_path / "old.json")))
    lat = extra.get("link_latency_s", 0.0)
    bw = extra.get("link_bandwidth_Bps", float("inf"))
    crossing = extra.get("boundary_s", 0.0)
    for p in split_placements(g.num_nodes, 2, 12, seed=6):
        assert sim.sequential(p).value == pytest.approx(_by_hand(g, times, p, crossing, lat, bw), rel=1e-12)


def test_calibration_and_link_fit_recover_a_machine_whose_ops_run_faster_in_one_graph():
    """The machine runs every op of device A at 0.6x and of B at 1.4x the times recorded
    op by op, and charges per crossing and per tensor: with one whole-model measurement
    per device and splits, the calibrated, fitted profile prices held-out placements
    within 1%, where the link fit alone (no calibration) is off by more than 10%; and
    ``uncalibrated`` gives back the times as recorded."""
    g, times = _graph_and_times()
    machine = {"A": {k: 0.6 * v for k, v in times["A"].items()},
               "B": {k: 1.4 * v for k, v in times["B"].items()}}
    truth = Simulator(cost_graph(g, Profile("tiny", {"A": {}, "B": {}}, machine,
                                            link_latency_s=2e-4, boundary_s=1e-3)))
    fit_ps = split_placements(g.num_nodes, 2, 12, seed=1)
    held = split_placements(g.num_nodes, 2, 12, seed=2)[4:]
    y = [truth.sequential(p).value for p in fit_ps]
    whole = {"A": truth.sequential(np.zeros(g.num_nodes, np.int64)).value,
             "B": truth.sequential(np.ones(g.num_nodes, np.int64)).value}

    def held_error(prof):
        sim = Simulator(cost_graph(g, prof))
        return max(abs(sim.sequential(p).value / truth.sequential(p).value - 1) for p in held)

    plain = Profile("tiny", {"A": {}, "B": {}}, {d: dict(t) for d, t in times.items()})
    fit_link_costs(g, plain, fit_ps, y)
    calibrated = Profile("tiny", {"A": {}, "B": {}}, {d: dict(t) for d, t in times.items()})
    scales = calibrate_compute(g, calibrated, whole)
    fit = fit_link_costs(g, calibrated, fit_ps, y)
    assert scales == pytest.approx({"A": 0.6, "B": 1.4}, rel=1e-9)
    assert fit["compute_scale"] == scales
    assert held_error(calibrated) < 0.01 < 0.1 < held_error(plain)
    for d in ("A", "B"):
        assert uncalibrated(calibrated).op_time_s[d] == pytest.approx(times[d], rel=1e-12)
    # a device without a whole-model figure (it did not fit) keeps its times
    other = Profile("tiny", {"A": {}, "B": {}}, {d: dict(t) for d, t in times.items()})
    assert calibrate_compute(g, other, {"A": whole["A"]}) == pytest.approx({"A": 0.6})
    assert other.op_time_s["B"] == times["B"]
