"""Deploying a placement: real OpenVINO on two CPU devices (bf16 CPU, f32 CPU_F32)."""
import json
import subprocess
import sys
import textwrap

import numpy as np
import openvino as ov
import pytest

from hsdag_ray.apply import main
from hsdag_ray.cli import run
from hsdag_core.coarsening import build_graph
from tests.test_cli import assert_user_error
from hsdag_ray.placed import load_placed

FAST = ["--warmup", "1", "--repeats", "3", "--precision", "0", "--block", "1"]
#: whether OpenVINO's CPU device computes in bf16 here (it falls back to f32 where the
#: processor has no bf16 instructions, and then CPU and CPU_F32 give the same outputs)
CPU_BF16 = "BF16" in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
DEVICES = ["--devices", "CPU,CPU_F32"]


def cli(*args):
    r = subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, timeout=300)
    return r.returncode, r.stdout, r.stderr




@pytest.fixture(scope="module")
def tiny():
    model, graph, _, _ = build_graph("tiny_cnn", "none")
    return model, graph


def half_placement(graph, path):
    """The first half of the nodes (model order) on CPU, the rest on CPU_F32, keyed by op names."""
    n = graph.num_nodes
    nodes = {name: "CPU" if i < n // 2 else "CPU_F32" for i, name in enumerate(graph.names)}
    affinity = graph.expand_placement(nodes)
    path.write_text(json.dumps(affinity))
    return affinity


def unsplit_f32(model, inputs):
    compiled = ov.Core().compile_model(model, "CPU", {ov.properties.hint.inference_precision(): ov.Type.f32})
    return [compiled(inputs)[i] for i in range(len(compiled.outputs))]


def relative_error(out, ref):
    return float(np.max(np.abs(out - ref)) / np.max(np.abs(ref)))


@pytest.mark.parametrize("backend", ["pipeline", "hetero"])
def test_split_placement_runs_matches_and_is_timed(tmp_path, tiny, backend):
    model, graph = tiny
    affinity = half_placement(graph, tmp_path / "p.json")
    save = tmp_path / "placed"
    assert main(["--model", "tiny_cnn", "--placement", str(tmp_path / "p.json"), *DEVICES,
                 "--backend", backend, "--save", str(save), *FAST, "--rounds", "2"]) == 0
    res = json.loads((save / "apply.json").read_text())
    placed = res["placed"]
    assert placed["ok"] and placed["info"]["path"] == backend
    assert placed["info"]["devices_used"] == ["CPU", "CPU_F32"]
    assert res["nodes_per_device"] == {"CPU": graph.num_nodes // 2,
                                       "CPU_F32": graph.num_nodes - graph.num_nodes // 2}
    # part of it runs at bf16 where the CPU computes in bf16: an error, within the bf16
    # tolerance, but more than f32 alone gives; a CPU without bf16 runs both halves at f32
    if CPU_BF16:
        assert 0 < placed["info"]["max_rel_error"] <= placed["info"]["tolerance"] == 5e-2
    else:
        assert placed["info"]["max_rel_error"] < 1e-4
    assert res["single"]["CPU_F32"]["info"]["max_rel_error"] < 1e-4
    # next to every single device and AUTO, each with its repeats (3 blocks x 2 rounds) and spread
    assert set(res["single"]) == {"CPU", "CPU_F32"}
    for row in [placed, *res["single"].values(), res["auto"]]:
        assert row["ok"] and len(row["samples_s"]) == 6 and row["info"]["rounds"] == 2
        assert row["runs"] == 6 and row["spread"] >= 0
        assert row["latency_s"] == pytest.approx(float(np.median(row["samples_s"])))
    for row in res["single"].values():
        assert row["info"]["path"] == "single"
        assert row["placement_speedup"] == pytest.approx(row["latency_s"] / placed["latency_s"])
    assert res["auto"]["info"]["auto_device"] == "AUTO:CPU"
    # the saved model: the whole IR with the placement in its rt_info, stages only for the pipeline
    saved = res["saved"]
    assert saved["ok"] and saved["path"] == backend and saved["max_rel_error"] <= saved["tolerance"]
    ir = ov.Core().read_model(save / "model.xml")
    assert json.loads(ir.get_rt_info(["hsdag_placement", "affinity"]).astype(str)) == {
        op.get_friendly_name(): affinity[op.get_friendly_name()] for op in model.get_ordered_ops()}
    manifest = json.loads((save / "placed.json").read_text())
    if backend == "pipeline":
        assert [s["device"] for s in manifest["stages"]] == ["CPU", "CPU_F32"]
        assert sum(s["ops"] for s in manifest["stages"]) == graph.num_nodes
        assert all((save / s["file"]).is_file() for s in manifest["stages"])
    else:
        assert manifest["stages"] == [] and not list(save.glob("stage*.xml"))


def test_saved_placement_runs_in_a_fresh_process(tmp_path, tiny):
    model, graph = tiny
    half_placement(graph, tmp_path / "p.json")
    save = tmp_path / "placed"
    # saved in this process (test_bad_input_exits_2 runs the command's own process), loaded
    # in a fresh one
    assert main(["--model", "tiny_cnn", "--placement", str(tmp_path / "p.json"), *DEVICES,
                 "--backend", "pipeline", "--save", str(save), *FAST]) == 0
    x = np.random.default_rng(7).standard_normal((1, 3, 32, 32)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    script = textwrap.dedent(f"""
        import numpy as np
        from hsdag_ray.placed import load_placed
        placed = load_placed({str(save)!r})
        assert placed.path == "pipeline" and placed.devices == ["CPU", "CPU_F32"], placed.path
        np.save({str(tmp_path / 'y.npy')!r}, placed({{"input": np.load({str(tmp_path / 'x.npy')!r})}})[0])
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    y = np.load(tmp_path / "y.npy")
    ref = unsplit_f32(model, [x])[0]
    assert y.shape == ref.shape
    # the bf16 half still runs at bf16 after loading (where the CPU has bf16)
    assert (0 < relative_error(y, ref) if CPU_BF16 else relative_error(y, ref) < 1e-4)
    assert relative_error(y, ref) < 5e-2
    # all on the f32 device, loaded in this process with a fresh Core: the f32 outputs exactly
    affinity = {op.get_friendly_name(): "CPU_F32" for op in model.get_ordered_ops()}
    (tmp_path / "f32.json").write_text(json.dumps(affinity))
    assert main(["--model", "tiny_cnn", "--placement", str(tmp_path / "f32.json"), *DEVICES,
                 "--save", str(tmp_path / "f32"), *FAST]) == 0
    single = load_placed(tmp_path / "f32")
    assert single.path == "single" and single.devices == ["CPU_F32"]
    assert relative_error(single([x])[0], ref) < 1e-5
    assert np.array_equal(single(x)[0], single({"input": x})[0])
    with pytest.raises(ValueError, match="shape"):
        single([x[:, :, :16]])


def test_bad_input_exits_2(tmp_path, tiny, capsys):
    _, graph = tiny

    def apply_cli(*args):
        code = run(main, list(args), prog="hsdag_ray.apply")
        return code, capsys.readouterr().err

    # one real command line: exit 2, one sentence, no traceback
    code, _, err = cli("hsdag_ray.apply", "--model", "tiny_cnn", "--placement", str(tmp_path / "none.json"))
    assert_user_error(code, err, "none.json", "neither a file")
    other = tmp_path / "other.json"
    other.write_text(json.dumps({f"resnet_op_{i}": "CPU" for i in range(5)}))
    assert_user_error(*apply_cli("--model", "tiny_cnn", "--placement", str(other)),
                      "resnet_op_0", "another model")
    partial = tmp_path / "partial.json"
    partial.write_text(json.dumps({graph.nodes[0].ops[0]: "CPU"}))
    assert_user_error(*apply_cli("--model", "tiny_cnn", "--placement", str(partial)), "no device for")
    half_placement(graph, tmp_path / "p.json")
    assert_user_error(*apply_cli("--model", "tiny_cnn", "--placement", str(tmp_path / "p.json"),
                                 "--devices", "CPU,NPU9"), "NPU9")
    assert_user_error(*apply_cli("--model", "tiny_cnn", "--placement", str(tmp_path / "p.json"),
                                 "--devices", "CPU"), "CPU_F32", "--devices")
    assert_user_error(*apply_cli("--model", "no_such_model", "--placement", str(tmp_path / "p.json")),
                      "unknown model")
    assert not list(tmp_path.glob("apply.json"))
    with pytest.raises(ValueError, match="placed.json"):
        load_placed(tmp_path)


@pytest.mark.slow
def test_train_then_apply_its_best_placement(tmp_path, tiny):
    model, _ = tiny
    code, _, err = cli("hsdag_ray.train", "--model", "tiny_cnn", "--backend", "auto", *DEVICES,
                       "--budget", "10", "--episode-len", "10", "--env-runners", "0", "--repeats", "2", "--precision", "0",
                       "--remeasure-rounds", "1", "--wandb", "disabled", "--out", str(tmp_path), "--name", "run")
    assert code == 0, err
    best = tmp_path / "run" / "best_placement.json"
    code, out, err = cli("hsdag_ray.apply", "--model", "tiny_cnn", "--placement", str(best), *DEVICES,
                         "--save", str(tmp_path / "deployed"), *FAST)
    assert code == 0, err
    assert "outputs match" in out and "OpenVINO AUTO" in out
    res = json.loads((tmp_path / "deployed" / "apply.json").read_text())
    assert res["placed"]["ok"] and res["saved"]["ok"]
    placement = json.loads(best.read_text())
    assert sum(res["nodes_per_device"].values()) == len(build_graph("tiny_cnn", "none")[1].names)
    assert set(res["nodes_per_device"]) == set(placement.values())
    x = np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32)
    out = load_placed(tmp_path / "deployed")([x])[0]
    assert relative_error(out, unsplit_f32(model, [x])[0]) < 5e-2
