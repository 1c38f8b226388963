"""Profiles: modeled devices, cost graphs built from them, fitting to real measurements."""
import numpy as np
import pytest

from envs.simulator import Simulator
from hsdag_core.compgraph import GraphError, from_ov_model
from hsdag_core.models import tiny_cnn
from envs.profiling import fit_link_costs, record
from hsdag_core.device_profile import (MODELED_DEVICES, REFERENCE_BOUNDARY_S, DeviceSpec, Profile,
                                    add_modeled_device, cost_graph, default_boundary_s,
                                    modeled_op_times, split_placements)
from tests.test_graph import small_model


def test_modeled_times_roofline_plus_overhead():
    g = from_ov_model(small_model())
    spec = DeviceSpec(peak_flops=1e9, mem_bandwidth_Bps=1e6, op_overhead_s=1e-3)
    t = modeled_op_times(g, spec)
    mm = g.nodes[0]  # 32 FLOPs; reads 16 + 64 bytes, writes 16
    assert t["mm1"] == pytest.approx(max(32 / 1e9, 96 / 1e6) + 1e-3)
    assert t["W"] == 0 and t["x"] == 0
    assert set(t) == {op for n in g.nodes for op in n.ops}


def test_modeled_devices_scale_to_the_measured_host():
    """A host 3x faster than the reference CPU gets a GPU_SMALLMEM 3x faster
    in everything (math, launches, link) and a boundary cost 3x smaller, so
    the placement problem has the same shape on a slow and a fast CPU."""
    g = from_ov_model(small_model())
    reference = modeled_op_times(g, MODELED_DEVICES["CPU_MODEL"])
    prof = Profile("small", {"CPU": {"kind": "measured"}}, {"CPU": {k: v / 3 for k, v in reference.items()}})
    add_modeled_device(prof, g, "GPU_SMALLMEM", relative_to="CPU")
    assert prof.devices["GPU_SMALLMEM"]["host_scale"] == pytest.approx(3.0)
    absolute = modeled_op_times(g, MODELED_DEVICES["GPU_SMALLMEM"])
    assert prof.op_time_s["GPU_SMALLMEM"] == pytest.approx({k: v / 3 for k, v in absolute.items()})
    assert prof.pairs["CPU->GPU_SMALLMEM"]["latency_s"] == pytest.approx(
        MODELED_DEVICES["GPU_SMALLMEM"].link_latency_s / 3)
    assert prof.mem_capacity["GPU_SMALLMEM"] == MODELED_DEVICES["GPU_SMALLMEM"].memory_bytes
    assert default_boundary_s(prof) == pytest.approx(REFERENCE_BOUNDARY_S / 3)
    # without relative_to the spec is taken as written
    add_modeled_device(prof, g, "GPU_MODEL")
    assert "host_scale" not in prof.devices["GPU_MODEL"]
    assert prof.op_time_s["GPU_MODEL"] == pytest.approx(modeled_op_times(g, MODELED_DEVICES["GPU_MODEL"]))


def test_cost_graph_sums_op_times_and_keeps_tensors():
    g = from_ov_model(small_model())
    prof = Profile("small", {"A": {"kind": "measured"}}, {"A": {n: 1e-3 for n in g.names}})
    prof.op_time_s["A"]["W"] = 5e-4  # an attached op's time counts for its node
    add_modeled_device(prof, g, "B", DeviceSpec(1e9, 1e6, 0.0, memory_bytes=50.0,
                                                link_bandwidth_Bps=100.0, link_latency_s=0.01))
    cg = cost_graph(g, prof)
    assert cg.devices == ["A", "B"] and cg.modeled == {"A": False, "B": True}
    assert cg.compute_s[0, 0] == pytest.approx(1.5e-3) and cg.compute_s[1, 0] == pytest.approx(1e-3)
    assert cg.num_tensors == 5 and cg.mem_bytes[0] == 64 and cg.mem_capacity.tolist() == [np.inf, 50.0]
    assert cg.transfer_s()[0, 0, 1] == pytest.approx(0.01 + 16 / 100.0)
    r = Simulator(cg).evaluate(cg.single_device("B"), "sequential")
    assert not r.feasible and "memory" in r.violation
    with pytest.raises(GraphError, match="not in the profile"):
        cost_graph(g, prof, ["A", "GPU"])
    other = Profile("x", {"A": {}}, {"A": {"conv_of_another_model": 1.0}})
    with pytest.raises(GraphError, match="another model"):
        cost_graph(g, other)


def test_fit_recovers_boundary_and_link_costs():
    g = from_ov_model(tiny_cnn())
    prof = Profile("tiny", {"A": {}, "B": {}},
                   {"A": {n: 1e-3 for n in g.names}, "B": {n: 2e-3 for n in g.names}})
    truth = Profile("tiny", prof.devices, prof.op_time_s, link_latency_s=2e-4,
                    link_bandwidth_Bps=1e9, boundary_s=7e-4)
    sim = Simulator(cost_graph(g, truth))
    ps = split_placements(g.num_nodes, 2, 12)
    assert len({p.tobytes() for p in ps}) == 12
    y = [sim.sequential(p).value for p in ps]
    fit = fit_link_costs(g, prof, ps, y)
    assert prof.boundary_s == pytest.approx(7e-4, rel=1e-6)
    assert prof.link_latency_s == pytest.approx(2e-4, rel=1e-6)
    assert prof.link_bandwidth_Bps == pytest.approx(1e9, rel=1e-6)
    assert fit["mean_rel_error"] < 1e-9 and fit["spearman_fitted"] == pytest.approx(1.0)


def test_record_real_profile_and_round_trip(tmp_path):
    prof = record("tiny_cnn", ["CPU", "CPU_F32"], ["GPU_MODEL"], fit=6, progress=False)
    assert prof.device_names == ["CPU", "CPU_F32", "GPU_MODEL"]
    assert prof.devices["CPU_F32"]["kind"] == "measured" and "virtual" in prof.devices["CPU_F32"]["description"]
    assert prof.is_modeled("GPU_MODEL")
    conv = [op for op in prof.op_time_s["CPU"] if op.endswith("conv1")]
    assert conv and all(prof.op_time_s[d][conv[0]] > 0 for d in ("CPU", "CPU_F32"))
    assert prof.fit["placements"] >= 3 and prof.boundary_s >= 0
    prof.save(tmp_path / "p.json")
    back = Profile.load(tmp_path / "p.json")
    assert back.to_json() == prof.to_json()
    (tmp_path / "bad.json").write_text('{"model": "m"}')
    with pytest.raises(GraphError, match="not a profile"):
        Profile.load(tmp_path / "bad.json")


def test_busy_note_says_when_the_machine_is_loaded():
    from envs.profiling import busy_note

    assert busy_note(threshold=1e9) is None
    note = busy_note(threshold=-1.0)  # any load is above a negative threshold
    assert note is not None and "busy" in note and "idle machine" in note
