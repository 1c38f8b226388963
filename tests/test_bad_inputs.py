"""Bad input, checked whole: every case exits 2 with one sentence on stderr that names
the file (or flag) at fault, never a traceback, and before anything long starts.

The cases run through the real command lines in this process (``hsdag_ray.cli.run``,
as ``python -m`` runs them), so they are cheap; ``test_cli.py`` runs a few as
subprocesses."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Callable

import pytest

from hsdag_ray.cli import run

MODELED = ("CPU_MODEL", "GPU_MODEL")


@pytest.fixture(scope="module")
def graph():
    from hsdag_core.coarsening import build_graph

    _, fine, _, _ = build_graph("tiny_cnn", "none")
    return fine


@pytest.fixture(scope="module")
def good_profile(graph) -> dict:
    from hsdag_core.device_profile import Profile, add_modeled_device

    prof = Profile(model="tiny_cnn", devices={}, op_time_s={})
    for name in MODELED:
        add_modeled_device(prof, graph, name)
    prof.boundary_s = 5e-4
    return json.loads(json.dumps(prof.to_json()))


def _command(name: str) -> Callable:
    import importlib

    return importlib.import_module(f"hsdag_ray.{name}").main


def one_error(capsys, command: str, argv: list[str]) -> str:
    """Run ``python -m hsdag_ray.<command> argv`` here; assert exit 2 and one sentence on
    stderr without a traceback; return that line."""
    capsys.readouterr()
    code = run(_command(command), [str(a) for a in argv], prog=f"hsdag_ray.{command}")
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err, err
    lines = [ln for ln in err.strip().splitlines() if ln.strip() and "warn" not in ln.lower()]
    assert len(lines) == 1, err
    assert lines[0].startswith(f"hsdag_ray.{command}: error: "), lines[0]
    return lines[0]


def _first_op(d: dict, device: str) -> str:
    return next(iter(d["op_time_s"][device]))


# profile edits: (what, edit of the profile dict, words the message must hold)
PROFILE_CASES = [
    ("negative boundary", lambda d: d.update(boundary_s=-1.0), ["boundary_s", "-1"]),
    ("NaN link latency", lambda d: d.update(link_latency_s=math.nan), ["link_latency_s", "nan"]),
    ("infinite link latency", lambda d: d.update(link_latency_s=math.inf), ["link_latency_s", "inf"]),
    ("zero link bandwidth", lambda d: d.update(link_bandwidth_Bps=0), ["link_bandwidth_Bps", "> 0"]),
    ("negative op time", lambda d: d["op_time_s"]["GPU_MODEL"].update({_first_op(d, "GPU_MODEL"): -1e-3}),
     ["op_time_s", "GPU_MODEL", "'stem'"]),
    ("NaN op time", lambda d: d["op_time_s"]["CPU_MODEL"].update({_first_op(d, "CPU_MODEL"): math.nan}),
     ["op_time_s", "CPU_MODEL", "'stem'", "nan"]),
    ("op time not a number", lambda d: d["op_time_s"]["CPU_MODEL"].update({_first_op(d, "CPU_MODEL"): "fast"}),
     ["op_time_s", "'fast'"]),
    ("negative pair latency", lambda d: d["pairs"]["CPU_MODEL->GPU_MODEL"].update(latency_s=-5e-6),
     ["latency_s", "CPU_MODEL->GPU_MODEL"]),
    ("negative pair bandwidth", lambda d: d["pairs"]["GPU_MODEL->CPU_MODEL"].update(bandwidth_Bps=-8e9),
     ["bandwidth_Bps", "GPU_MODEL->CPU_MODEL"]),
    ("negative memory capacity", lambda d: d.update(mem_capacity={"GPU_MODEL": -1}),
     ["mem_capacity", "GPU_MODEL"]),
    ("NaN spec", lambda d: d["devices"]["GPU_MODEL"]["spec"].update(peak_flops=math.nan),
     ["peak_flops", "GPU_MODEL"]),
    ("a list", lambda d: (d.clear(), d.update(_list=True)), ["array"]),
    ("no op times", lambda d: d.pop("op_time_s"), ["op_time_s"]),
]


def _write_profile(tmp_path: Path, good: dict, edit) -> Path:
    d = json.loads(json.dumps(good))
    edit(d)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps([d] if d.pop("_list", False) else d))
    return path


@pytest.mark.parametrize("what,edit,words", PROFILE_CASES, ids=[c[0] for c in PROFILE_CASES])
def test_a_bad_profile_names_the_file_the_field_and_the_op(capsys, tmp_path, good_profile, what,
                                                           edit, words):
    path = _write_profile(tmp_path, good_profile, edit)
    measure = one_error(capsys, "measure", ["--model", "tiny_cnn", "--backend", "simulator",
                                            "--profile", path, "--placement", "all:CPU_MODEL"])
    train = one_error(capsys, "train", ["--model", "tiny_cnn", "--backend", "simulator",
                                        "--profile", path, "--budget", "4", "--wandb", "disabled",
                                        "--out", tmp_path / "runs"])
    for line in (measure, train):
        for w in [str(path), *words]:
            assert w in line, line


def test_a_good_profile_is_accepted(tmp_path, good_profile):
    from hsdag_core.device_profile import Profile

    path = tmp_path / "good.json"
    path.write_text(json.dumps(good_profile))
    prof = Profile.load(path)
    assert prof.device_names == list(MODELED) and math.isinf(prof.link_bandwidth_Bps)
    # no memory limit (null) and an unlimited link are not errors
    good_profile = dict(good_profile, mem_capacity={"GPU_MODEL": None}, link_bandwidth_Bps=None)
    path.write_text(json.dumps(good_profile))
    assert math.isinf(Profile.load(path).mem_capacity["GPU_MODEL"])


# ------------------------------------------------------------------ one device
@pytest.mark.parametrize("argv,words", [
    (["--backend", "simulator", "--devices", "CPU_MODEL"], ["only CPU_MODEL", "two devices"]),
    (["--backend", "simulator", "--devices", "CPU"], ["only CPU", "two devices"]),
    (["--backend", "simulator", "--devices", "GPU_MODEL,GPU_MODEL"], ["GPU_MODEL 2 times"]),
    (["--backend", "auto", "--devices", "CPU"], ["only CPU", "two devices", "CPU,CPU_F32"]),
    (["--backend", "hetero", "--devices", "CPU"], ["only CPU", "two devices"]),
    (["--backend", "pipeline", "--devices", "CPU"], ["only CPU", "two devices"]),
    (["--devices", "CPU"], ["only CPU", "two devices"]),
], ids=["simulator-modeled", "simulator-cpu", "simulator-twice", "auto", "hetero", "pipeline",
        "default"])
def test_train_refuses_one_device_on_every_backend(capsys, tmp_path, argv, words):
    line = one_error(capsys, "train", ["--model", "tiny_cnn", *argv, "--budget", "4",
                                       "--wandb", "disabled", "--out", tmp_path])
    for w in ["--devices", *words]:
        assert w in line, line


def test_a_profile_of_one_device_is_refused(capsys, tmp_path, good_profile):
    one = dict(good_profile, devices={"CPU_MODEL": good_profile["devices"]["CPU_MODEL"]},
               op_time_s={"CPU_MODEL": good_profile["op_time_s"]["CPU_MODEL"]}, pairs={})
    path = tmp_path / "one.json"
    path.write_text(json.dumps(one))
    line = one_error(capsys, "train", ["--model", "tiny_cnn", "--backend", "simulator", "--profile",
                                       path, "--budget", "4", "--wandb", "disabled", "--out", tmp_path])
    assert str(path) in line and "only CPU_MODEL" in line and "two devices" in line, line
    line = one_error(capsys, "profile", ["--model", "tiny_cnn", "--devices", "CPU",
                                         "--out", tmp_path / "p.json"])
    assert "only CPU" in line and "--modeled" in line, line
    assert not (tmp_path / "p.json").exists()


@pytest.mark.parametrize("placement", ["split:0.5", "random:1"])
def test_measure_refuses_a_split_over_one_device(capsys, tmp_path, good_profile, placement):
    path = tmp_path / "good.json"
    path.write_text(json.dumps(good_profile))
    line = one_error(capsys, "measure", ["--model", "tiny_cnn", "--backend", "simulator",
                                         "--profile", path, "--devices", "CPU_MODEL",
                                         "--placement", placement])
    assert placement in line and "only CPU_MODEL" in line, line


def test_measure_refuses_a_device_the_profile_lacks(capsys, tmp_path, good_profile):
    path = tmp_path / "good.json"
    path.write_text(json.dumps(good_profile))
    line = one_error(capsys, "measure", ["--model", "tiny_cnn", "--backend", "simulator",
                                         "--profile", path, "--devices", "CPU_MODEL,NPU_MODEL"])
    assert "NPU_MODEL" in line and str(path) in line, line


# --------------------------------------------------------------- unwritable --out
def test_an_out_under_a_file_is_one_sentence(capsys, tmp_path, good_profile):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    profile = tmp_path / "good.json"
    profile.write_text(json.dumps(good_profile))
    cases = {
        "train": ["--model", "tiny_cnn", "--backend", "simulator", "--profile", profile,
                  "--budget", "4", "--wandb", "disabled", "--out", blocker / "runs"],
        "pretrain": ["--method", "hsdag", "--family", "tiny", "--budget", "4", "--out", blocker / "pre"],
        "profile": ["--model", "tiny_cnn", "--devices", "CPU", "--modeled", "GPU_MODEL",
                    "--out", blocker / "p.json"],
        "apply": ["--model", "tiny_cnn", "--placement", "all:CPU", "--out", blocker / "apply.json"],
    }
    for command, argv in cases.items():
        line = one_error(capsys, command, argv)
        assert f"{blocker} is a file, not a folder" in line and "--out" in line, (command, line)
    # --out itself a folder where apply and profile write a file
    line = one_error(capsys, "apply", ["--model", "tiny_cnn", "--placement", "all:CPU",
                                       "--out", tmp_path])
    assert "is a folder" in line and "--out" in line, line


# ------------------------------------------------------------------ placement files
def _placement_file(tmp_path: Path, graph, devices, rename: dict[str, str] | None = None) -> Path:
    nodes = {n: devices[i % len(devices)] for i, n in enumerate(graph.names)}
    ops = graph.expand_placement(nodes)
    if rename:
        ops = {op: rename.get(d, d) for op, d in ops.items()}
    path = tmp_path / "placement.json"
    path.write_text(json.dumps(ops))
    return path


def test_a_misspelt_device_in_a_placement_file_is_named(capsys, tmp_path, graph, good_profile):
    profile = tmp_path / "good.json"
    profile.write_text(json.dumps(good_profile))
    path = _placement_file(tmp_path, graph, MODELED, rename={"GPU_MODEL": "GPU0"})
    count = sum(1 for d in json.loads(path.read_text()).values() if d == "GPU0")
    line = one_error(capsys, "measure", ["--model", "tiny_cnn", "--backend", "simulator",
                                         "--profile", profile, "--placement", path])
    assert f"{path} places {count} op(s) on 'GPU0'" in line, line
    assert "did you mean GPU_MODEL" in line and "node" not in line, line
    # some ops of one node on the misspelt device: the device is named, not the split node
    ops = graph.expand_placement({n: "CPU_MODEL" for n in graph.names})
    node = next(n for n in graph.nodes if len(n.ops) > 1)
    ops[node.ops[-1]] = "GPU_MODL"
    path.write_text(json.dumps(ops))
    line = one_error(capsys, "measure", ["--model", "tiny_cnn", "--backend", "simulator",
                                         "--profile", profile, "--placement", path])
    assert "'GPU_MODL'" in line and "did you mean GPU_MODEL" in line, line
    # apply, on real devices
    path = _placement_file(tmp_path, graph, ["CPU", "CPU_F32"], rename={"CPU_F32": "CPU_F23"})
    line = one_error(capsys, "apply", ["--model", "tiny_cnn", "--placement", path,
                                       "--devices", "CPU,CPU_F32", "--out", tmp_path / "a.json"])
    assert "'CPU_F23'" in line and "did you mean CPU_F32" in line, line


def test_a_foreign_placement_file_names_the_file(capsys, tmp_path, good_profile):
    profile = tmp_path / "good.json"
    profile.write_text(json.dumps(good_profile))
    path = tmp_path / "resnet_placement.json"
    path.write_text(json.dumps({f"resnet50/layer{i}/conv": "CPU_MODEL" for i in range(4)}))
    line = one_error(capsys, "measure", ["--model", "tiny_cnn", "--backend", "simulator",
                                         "--profile", profile, "--placement", path])
    assert str(path) in line and "another model" in line, line
    path.write_text(json.dumps({f"resnet50/layer{i}/conv": "CPU" for i in range(4)}))
    line = one_error(capsys, "apply", ["--model", "tiny_cnn", "--placement", path,
                                       "--devices", "CPU,CPU_F32", "--out", tmp_path / "a.json"])
    assert str(path) in line and "another model" in line, line


# ------------------------------------------------------------ model and settings files
def _corrupt_ir(tmp_path: Path) -> Path:
    xml = tmp_path / "broken.xml"
    xml.write_text("<net name='x'><layers><layer id='0' type='Parameter'")
    (tmp_path / "broken.bin").write_bytes(b"\0" * 16)
    return xml


def _empty_onnx(tmp_path: Path) -> Path:
    path = tmp_path / "empty.onnx"
    path.write_bytes(b"")
    return path


def _garbage_onnx(tmp_path: Path) -> Path:
    path = tmp_path / "garbage.onnx"
    path.write_bytes(b"not a protobuf")
    return path


@pytest.mark.parametrize("make", [_corrupt_ir, _empty_onnx, _garbage_onnx],
                         ids=["corrupt-ir", "empty-onnx", "garbage-onnx"])
def test_a_broken_model_file_names_the_file(capsys, tmp_path, make):
    model = make(tmp_path)
    for command, argv in (("train", ["--budget", "4", "--wandb", "disabled", "--out", tmp_path / "r"]),
                          ("measure", []), ("graph", None)):
        args = [model] if argv is None else ["--model", model, *argv]
        line = one_error(capsys, command, args)
        assert model.name in line, (command, line)


@pytest.mark.parametrize("text,words", [
    ("budget: [1, 2\nmodel: tiny_cnn\n", ["not valid YAML"]),
    ("- budget: 3\n- model: tiny_cnn\n", ["mapping"]),
    ("just a sentence\n", ["mapping"]),
], ids=["broken-yaml", "yaml-list", "yaml-scalar"])
def test_a_broken_config_file_names_the_file(capsys, tmp_path, text, words):
    path = tmp_path / "run.yaml"
    path.write_text(text)
    line = one_error(capsys, "train", ["--config", path, "--wandb", "disabled", "--out", tmp_path])
    for w in [str(path), *words]:
        assert w in line, line
