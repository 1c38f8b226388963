"""Graph building, constant attachment, coarsening and features on hand-made graphs."""
import json

import numpy as np
import openvino as ov
import pytest
from openvino import opset13 as ops

from hsdag_core.features import FeatureConfig, OP_VOCAB, fractal_dimension, node_features, to_data
from hsdag_core.coarsening import coarsen_colocation, contract
from hsdag_core.compgraph import CompGraph, GraphError, from_ov_model


def small_model() -> ov.Model:
    """x -> mm1 -> r1 -> {a1, m1} -> sum -> reshape(shape of r1) -> result."""
    x = ops.parameter([1, 4], np.float32, name="x")
    w = ops.constant(np.eye(4, dtype=np.float32), name="W")
    mm1 = ops.matmul(x, w, False, False, name="mm1")
    r1 = ops.relu(mm1, name="r1")
    a1 = ops.add(r1, ops.constant(np.ones((1, 4), np.float32), name="bias"), name="a1")
    m1 = ops.multiply(r1, ops.constant(np.full((1, 4), 2, np.float32), name="scale"), name="m1")
    s = ops.add(a1, m1, name="sum")
    shape = ops.shape_of(r1, name="shape")
    rs = ops.reshape(s, shape, False, name="reshape")
    return ov.Model([ops.result(rs, name="out")], [x], "small")


def test_nodes_edges_and_attachment():
    g = from_ov_model(small_model())
    assert g.names == ["mm1", "r1", "a1", "m1", "sum", "reshape"]
    by = {n.name: n for n in g.nodes}
    assert sorted(by["mm1"].ops) == ["W", "mm1", "x"]
    assert sorted(by["a1"].ops) == ["a1", "bias"]
    assert sorted(by["reshape"].ops) == ["out", "reshape", "shape"]
    assert by["mm1"].weight_bytes == 64
    assert by["mm1"].flops == 2 * 4 * 4
    assert by["mm1"].output_shapes == [[1, 4]] and by["mm1"].output_types == ["f32"]
    pairs = [(g.names[e.src], g.names[e.dst]) for e in g.edges]
    assert pairs == [("mm1", "r1"), ("r1", "a1"), ("r1", "m1"), ("a1", "sum"), ("m1", "sum"),
                     ("sum", "reshape")]
    assert all(e.bytes == 16 and e.dtype == "f32" and e.shape == [1, 4] for e in g.edges)
    tensors, of_edge = g.tensors()
    assert len(tensors) == 5 and of_edge[1] == of_edge[2]  # r1's output read twice
    # every op of the model belongs to exactly one node
    all_ops = [op.get_friendly_name() for op in small_model().get_ordered_ops()]
    held = [op for n in g.nodes for op in n.ops]
    assert sorted(held) == sorted(all_ops)


def test_placement_expands_to_every_op_and_round_trips():
    g = from_ov_model(small_model())
    placement = {nm: ("CPU" if k % 2 else "CPU_F32") for k, nm in enumerate(g.names)}
    aff = g.expand_placement(placement)
    assert aff["W"] == aff["mm1"] == aff["x"] == "CPU_F32"
    assert aff["out"] == aff["shape"] == aff["reshape"]
    back = g.placement_from_ops(json.loads(json.dumps(aff)))
    assert back == placement
    with pytest.raises(GraphError, match="another model"):
        g.placement_from_ops({**aff, "conv_from_elsewhere": "CPU"})
    with pytest.raises(GraphError, match="no device"):
        g.placement_from_ops({k: v for k, v in aff.items() if k not in ("sum",)})


def test_colocation_coarsening_exact():
    g = from_ov_model(small_model())
    c, mapping = coarsen_colocation(g)
    assert [n.members for n in c.nodes] == [["mm1", "r1"], ["a1"], ["m1"], ["sum", "reshape"]]
    assert mapping.tolist() == [0, 0, 1, 2, 3, 3]
    assert [(e.src, e.dst) for e in c.edges] == [(0, 1), (0, 2), (1, 3), (2, 3)]
    # the tensor of r1 is still one tensor read by two groups
    tensors, of_edge = c.tensors()
    assert len(tensors) == 3 and of_edge[0] == of_edge[1]
    assert c.nodes[0].flops == g.nodes[0].flops + g.nodes[1].flops
    # a placement of the coarse graph maps to every op of the model
    aff = c.expand_placement({n.name: "CPU" for n in c.nodes})
    assert len(aff) == len(small_model().get_ordered_ops())


def test_contract_rejects_cycles_and_orders_topologically():
    g = from_ov_model(small_model())
    with pytest.raises(GraphError, match="cycle"):
        contract(g, [0, 1, 0, 2, 3, 4])  # mm1 with a1 but r1 apart: mm1 -> r1 -> a1
    c, mapping = contract(g, [5, 5, 1, 1, 0, 0])
    assert [n.name for n in c.nodes] == ["mm1", "a1", "sum"]
    assert mapping.tolist() == [0, 0, 1, 1, 2, 2]
    assert all(e.src < e.dst for e in c.edges)


def test_graph_json_round_trip(tmp_path):
    g = from_ov_model(small_model())
    p = tmp_path / "g.json"
    g.save(p)
    h = CompGraph.load(p)
    assert h.to_json() == g.to_json()
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(GraphError, match="not valid JSON"):
        CompGraph.load(tmp_path / "bad.json")


def test_features_exact():
    g = from_ov_model(small_model())
    x, names = node_features(g, FeatureConfig(fractal=False, cost=False))
    assert x.shape == (6, len(OP_VOCAB) + 1 + 4 + 2 * 9 + 1)
    col = {nm: k for k, nm in enumerate(names)}
    assert x[0, col["op=MatMul"]] == 1 and x[1, col["op=Relu"]] == 1
    assert x[:, : len(OP_VOCAB) + 1].sum(axis=1).tolist() == [1] * 6
    assert x[1, col["outdeg=2"]] == 1 and x[4, col["indeg=2"]] == 1 and x[0, col["indeg=0"]] == 1
    assert x[:, col["topo_pos"]].tolist() == pytest.approx([0, 0.2, 0.4, 0.6, 0.8, 1.0])
    assert x[0, col["shape[3]"]] == pytest.approx(np.log2(5) / 16)
    # switching groups off removes their columns
    x2, names2 = node_features(g, FeatureConfig(op_type=False, shape=False, degree=False,
                                                fractal=True, position="sin", cost=True))
    assert not any(n.startswith(("op=", "shape", "indeg", "outdeg")) for n in names2)
    assert "fractal_dim" in names2 and "topo_sin[0]" in names2 and "log_mflops" in names2
    d = to_data(g)
    assert d.x.shape[0] == 6 and d.edge_index.tolist() == g.edge_index().tolist()
    assert d.names == g.names


def test_fractal_dimension():
    # an isolated node: its ball never grows
    assert fractal_dimension(np.zeros((2, 0), dtype=np.int64), 1)[0] == 0
    # the middle of a long path: N(r) = 2r + 1
    n = 41
    path = np.array([np.arange(n - 1), np.arange(1, n)])
    r = np.arange(1, 7)
    expect = np.polyfit(np.log(r), np.log(2 * r + 1), 1)[0]
    assert fractal_dimension(path, n)[20] == pytest.approx(expect)
    # a 2-D grid grows faster than a path: higher dimension
    k = 15
    idx = np.arange(k * k).reshape(k, k)
    grid = np.concatenate([np.array([idx[:, :-1].ravel(), idx[:, 1:].ravel()]),
                           np.array([idx[:-1].ravel(), idx[1:].ravel()])], axis=1)
    centre = fractal_dimension(grid, k * k, chunk=7)[idx[7, 7]]  # chunking gives the same
    assert centre > 1.3 > expect
    assert centre == pytest.approx(fractal_dimension(grid, k * k)[idx[7, 7]])


def test_openvino_fusion_coarsening_follows_the_runtime_model():
    from hsdag_core.coarsening import build_graph

    model, fine, coarse, mapping = build_graph("tiny_cnn", "openvino")
    members = [n.members for n in coarse.nodes]
    # the CPU plugin fuses Convolution+ReLU, and Convolution+Add(skip)+ReLU
    assert ["stem", "stem/relu"] in members
    assert ["block0/conv2", "block0/add", "block0/relu2"] in members
    assert ["concat"] in members and ["fc"] in members
    assert coarse.num_nodes == 11 and all(e.src < e.dst for e in coarse.edges)
    assert sorted(op for n in coarse.nodes for op in n.ops) == sorted(
        op.get_friendly_name() for op in model.get_ordered_ops())
    assert all(coarse.nodes[mapping[i]].name == coarse.nodes[mapping[i]].members[0]
               and fine.nodes[i].name in coarse.nodes[mapping[i]].members for i in range(fine.num_nodes))


def test_graph_command_takes_backend_like_every_command(capsys):
    """``graph --backend torch`` prints the torch.export graph the torch backend places;
    the old ``--source`` flag is refused in one sentence naming ``--backend``."""
    from hsdag_ray.cli import run
    from hsdag_ray.graph import main

    assert run(main, ["tiny_cnn", "--backend", "torch"], prog="hsdag_ray.graph") == 0
    out = capsys.readouterr().out
    assert "torch.export (ATen) graph nodes" in out and "placeable graph" in out
    assert run(main, ["tiny_cnn", "--backend", "simulator"], prog="hsdag_ray.graph") == 0
    assert "OpenVINO ops" in capsys.readouterr().out
    assert run(main, ["tiny_cnn", "--source", "torch"], prog="hsdag_ray.graph") == 2
    err = capsys.readouterr().err
    assert "--backend torch" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
