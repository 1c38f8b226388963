"""The torch backend's own baseline and placed models: Accelerate's device map on GPT-2, and
``apply --backend torch --save`` reloaded in a fresh
process without OpenVINO or Ray (tiny_cnn; a Hugging Face model's output types), and a save
or load that cannot work answered in one sentence. For real on this machine's CPU: ``cpu``
and ``cpu:bf16``, with the timing cut as in tests/test_torch_backend.py.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from envs.backends import build_graph
from envs.base import TimingConfig
from envs.graph_backend import parse_placement
from envs.pytorch.backend import TorchBackend

ROOT = Path(__file__).resolve().parents[1]
DEVICES = ["cpu", "cpu:bf16"]
FAST = ["--warmup", "1", "--repeats", "2", "--precision", "0", "--block", "1"]
TIMING = TimingConfig(warmup=1, repeats=2, precision=0, block=1, validate_outputs=True)
#: a 4-layer GPT-2 whose blocks hold most of the weights (the default 50257-token embedding
#: alone would be 92% of them, and Accelerate maps modules in order)
GPT2 = "hf:gpt2:num_hidden_layers=4:n_embd=64:n_head=2:vocab_size=128:n_positions=128"


@pytest.fixture(scope="module")
def tiny():
    """tiny_cnn's torch program and its placement graph."""
    program, graph, _, _ = build_graph("tiny_cnn", "none", None, "torch")
    return program, graph


# -------------------------------------------------------------- apply --save, reload
RELOAD = textwrap.dedent("""
    import sys, torch
    from hsdag_ray.placed import load_placed
    placed = load_placed(sys.argv[1])
    ref = torch.load(sys.argv[2])
    out = placed(*placed.example_inputs)
    err = max(float((o - r).abs().max() / r.abs().max()) for o, r in zip(out, ref))
    assert len(out) == len(ref) and err <= 8e-2, err
    assert "openvino" not in sys.modules and "ray" not in sys.modules, "imported OpenVINO or Ray"
    print("stages", ",".join(placed.stages), "devices", ",".join(placed.devices), "err", err)
    """)


def test_apply_save_and_reload_in_a_fresh_process_without_openvino(tmp_path, tiny, capsys, monkeypatch):
    from envs.pytorch.stages import to_host
    from hsdag_ray.apply import main as apply_main

    program, _ = tiny
    save = tmp_path / "placed"
    monkeypatch.setenv("COLUMNS", "80")
    assert apply_main(["--backend", "torch", "--model", "tiny_cnn", "--devices", "cpu,cpu:bf16",
                       "--placement", "split:0.5", "--save", str(save), *FAST]) == 0
    out = capsys.readouterr().out
    assert "reloaded, its outputs match" in out and "Accelerate" in out
    # the table fits an 80-column terminal (lines naming a path may not)
    assert max(len(line) for line in out.splitlines() if str(tmp_path) not in line) <= 80
    assert {p.name for p in save.iterdir()} >= {"program.pt2", "inputs.pt", "placed.json", "apply.json"}
    manifest = json.loads((save / "placed.json").read_text())
    assert manifest["backend"] == "torch" and manifest["model"] == "tiny_cnn"
    assert manifest["devices"] == DEVICES and manifest["stages"] == DEVICES
    assert [i["name"] for i in manifest["inputs"]] == ["x"]
    result = json.loads((save / "apply.json").read_text())
    assert result["placed"]["ok"] and result["saved"]["ok"] and result["saved"]["stages"] == 2
    # no OpenVINO row is attempted on the torch backend
    assert result.get("auto") is None and not result.get("hetero")  # no OpenVINO rows
    assert set(result["single"]) == set(DEVICES) and all(r["ok"] for r in result["single"].values())
    assert list(result["own"]) == ["accelerate_auto"] and result["own"]["accelerate_auto"]["ok"]
    # a fresh process loads and runs it, reading the manifest first: no OpenVINO, no Ray
    with torch.inference_mode():
        ref = to_host(program.gm(*program.example_inputs))
    torch.save(ref, tmp_path / "ref.pt")
    script = tmp_path / "reload.py"
    script.write_text(RELOAD)
    r = subprocess.run([sys.executable, str(script), str(save), str(tmp_path / "ref.pt")],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert "stages cpu,cpu:bf16 devices cpu,cpu:bf16" in r.stdout


@pytest.mark.slow  # CI reloads tiny_cnn's save in a fresh process; this one adds the Hugging Face output types
def test_a_hugging_face_save_reloads_in_a_fresh_process(tmp_path):
    """A Hugging Face model returns a ModelOutput, which ``torch.export.load`` reads back only
    once transformers registered it: the manifest names the module, the loader imports it."""
    from envs.pytorch.saved import save_placed
    from envs.pytorch.stages import to_host

    program, graph, _, _ = build_graph("hf:gpt2:num_hidden_layers=2:n_embd=64:n_head=2", "none",
                                       None, "torch")
    placement = parse_placement("split:0.5", graph, DEVICES)
    manifest = save_placed(tmp_path / "gpt2", program, graph.expand_placement(placement), DEVICES)
    assert manifest["pytree_modules"] == ["transformers.modeling_outputs"]
    assert [i["name"] for i in manifest["inputs"]] == ["input_ids", "attention_mask"]
    with torch.inference_mode():
        torch.save(to_host(program.gm(*program.example_inputs)), tmp_path / "ref.pt")
    script = tmp_path / "reload.py"
    script.write_text(RELOAD)
    r = subprocess.run([sys.executable, str(script), str(tmp_path / "gpt2"), str(tmp_path / "ref.pt")],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "stages cpu,cpu:bf16" in r.stdout


def test_saved_placement_errors(tmp_path, tiny):
    from envs.pytorch.saved import load_placed as load_torch, save_placed

    program, graph = tiny
    affinity = graph.expand_placement(parse_placement("split:0.5", graph, DEVICES))
    with pytest.raises(ValueError, match="misses 1 op"):
        save_placed(tmp_path / "a", program, {k: v for k, v in affinity.items() if k != "relu"}, DEVICES)
    with pytest.raises(ValueError, match="cuda:0"):
        save_placed(tmp_path / "b", program, {k: "cuda:0" for k in affinity}, DEVICES)
    with pytest.raises(ValueError, match="holds no placed.json"):
        load_torch(tmp_path / "nothing")
    (tmp_path / "ov").mkdir()
    (tmp_path / "ov" / "placed.json").write_text(json.dumps({"format": "hsdag_ray.placed/1"}))
    with pytest.raises(ValueError, match="OpenVINO backend"):
        load_torch(tmp_path / "ov")
    # one device alone round-trips in this process as well
    save_placed(tmp_path / "c", program, {k: "cpu" for k in affinity}, ["cpu"])
    placed = load_torch(tmp_path / "c")
    assert placed.stages == ["cpu"] and placed.devices == ["cpu"]
    with torch.inference_mode():
        ref = program.gm(*program.example_inputs)[0]
    assert torch.allclose(placed(*placed.example_inputs)[0], ref, atol=1e-6)
    with pytest.raises(ValueError, match="shape"):
        placed(torch.zeros(1, 3, 8, 8))


def test_accelerate_map_puts_a_prefix_of_the_layers_on_the_accelerator():
    from envs.pytorch.accelerate_map import accelerate_device_map, accelerate_placement
    from envs.pytorch.devices import check_devices

    program, graph, _, _ = build_graph(GPT2, "none", None, "torch")
    weights = program.parameter_bytes()
    blocks = sum(p.numel() * 4 for p in program.module.h.parameters())
    assert blocks > 0.9 * weights  # the blocks hold the weights
    # Accelerate keeps room for one block beside what it maps, so 3/4 of the weights fit
    # the embeddings and the first block or two (the cap is in the device's bfloat16 bytes,
    # which Accelerate is given as the float32 bytes they hold)
    specs = ["cpu", f"cpu:bf16:mem={int(0.75 * weights / 2)}B"]
    devices = check_devices(specs)
    dmap = accelerate_device_map(program, devices)
    on_accel = [k for k in range(4) if dmap.get(f"h.{k}", dmap.get("h")) == "cpu:bf16"]
    assert 1 <= len(on_accel) < 4 and on_accel == list(range(len(on_accel))), dmap
    assert dmap["wte"] == "cpu:bf16" and dmap["ln_f"] == "cpu"
    assert all(dmap[f"h.{k}"] == "cpu" for k in range(len(on_accel), 4))
    # as a node placement: a prefix of the graph on the accelerator, the rest on the CPU
    placement = accelerate_placement(program, graph, devices)
    assert placement.shape == (graph.num_nodes,)
    cut = int(np.argmin(placement))
    assert cut > 0 and (placement[:cut] == 1).all() and (placement[cut:] == 0).all()
    # it measures like any placement, under the cap, outputs checked
    torch_backend = TorchBackend(graph, program, specs, TIMING)
    m = torch_backend.measure_array(placement)
    assert m.ok, m.error
    assert m.info["stages"] == 2
