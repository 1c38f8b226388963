"""Command lines: bad input gives exit code 2 and one sentence, never a traceback."""
import json
import re
import subprocess
import sys

import pytest

from hsdag_core.coarsening import build_graph


def cli(*args, cwd=None):
    r = subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, cwd=cwd,
                       timeout=300)
    return r.returncode, r.stdout, r.stderr


def cli_here(capsys, module: str, *args):
    """``python -m module args`` called in this process, as its ``__main__`` calls it:
    (exit code, stdout, stderr). Each command also runs in a process of its own in
    test_missing_model_file and test_measure_and_graph_commands_work."""
    import importlib

    from hsdag_ray.cli import run

    capsys.readouterr()
    try:
        code = run(importlib.import_module(module).main, list(args), prog=module)
    except SystemExit as e:  # argparse's own errors
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def assert_user_error(code, err, *words):
    assert code == 2, err
    assert "Traceback" not in err
    lines = [ln for ln in err.strip().splitlines() if ln.strip() and "warn" not in ln.lower()]
    assert len(lines) == 1, err
    for w in words:
        assert w in lines[0], lines[0]


def test_missing_model_file(tmp_path):
    code, _, err = cli("hsdag_ray.graph", str(tmp_path / "nope.xml"))
    assert_user_error(code, err, "does not exist")
    code, _, err = cli("hsdag_ray.measure", "--model", "no_such_model")
    assert_user_error(code, err, "unknown model")


def test_corrupt_ir(tmp_path, capsys):
    xml = tmp_path / "broken.xml"
    xml.write_text("<net name='x'><layers><layer id='0' type='Parameter'")
    (tmp_path / "broken.bin").write_bytes(b"\0" * 16)
    code, _, err = cli_here(capsys, "hsdag_ray.graph", str(xml))
    assert_user_error(code, err, "not a valid OpenVINO IR")
    xml.write_text("<net name='x' version='11'><layers><layer id='0' type='Nonsense' "
                   "version='opset1'/></layers><edges/></net>")
    code, _, err = cli_here(capsys, "hsdag_ray.graph", str(xml))
    assert_user_error(code, err, "cannot read")
    onnx = tmp_path / "broken.onnx"
    onnx.write_bytes(b"not a protobuf")
    code, _, err = cli_here(capsys, "hsdag_ray.graph", str(onnx))
    assert_user_error(code, err, "cannot read")


def test_unknown_device(capsys):
    code, _, err = cli_here(capsys, "hsdag_ray.measure", "--model", "tiny_cnn", "--devices", "CPU,NPU9")
    assert_user_error(code, err, "NPU9")


def test_placement_for_another_model(tmp_path, capsys):
    _, _, g, _ = build_graph("tiny_cnn", "none")
    other = {f"resnet_op_{i}": "CPU" for i in range(5)}
    f = tmp_path / "p.json"
    f.write_text(json.dumps(other))
    code, _, err = cli_here(capsys, "hsdag_ray.measure", "--model", "tiny_cnn", "--placement", str(f))
    assert_user_error(code, err, "another model")
    # a placement naming a device that is not in --devices
    f.write_text(json.dumps(g.expand_placement({n: "GPU" for n in g.names})))
    code, _, err = cli_here(capsys, "hsdag_ray.measure", "--model", "tiny_cnn", "--placement", str(f))
    assert_user_error(code, err, "GPU")


def test_measure_and_graph_commands_work(tmp_path):
    out = tmp_path / "g.json"
    code, text, err = cli("hsdag_ray.graph", "tiny_cnn", "--out", str(out))
    assert code == 0, err
    assert "22 nodes, 25 edges" in text and "after colocation coarsening: 9 nodes" in text
    assert json.loads(out.read_text())["name"] == "tiny_cnn"
    code, text, err = cli("hsdag_ray.measure", "--model", "tiny_cnn", "--placement", "split:0.5",
                          "--repeats", "3", "--precision", "0", "--json")
    assert code == 0, err
    res = json.loads(text)
    assert res["measurement"]["ok"] and res["measurement"]["latency_s"] > 0
    assert res["nodes_per_device"] == {"CPU": 11, "CPU_F32": 11}
    assert any("virtual" in d for d in res["devices"])


def test_measure_openvino_auto_device(capsys):
    code, text, err = cli_here(capsys, "hsdag_ray.measure", "--model", "tiny_cnn", "--devices", "CPU,CPU_F32",
                          "--placement", "auto", "--repeats", "3", "--precision", "0")
    assert code == 0, err
    assert "placement: the whole model on AUTO:CPU" in text
    latency = re.search(r"latency ([0-9.]+) ms .* via openvino-auto-device \[AUTO:CPU executed on CPU\]", text)
    assert latency and float(latency.group(1)) > 0, text
    code, text, err = cli_here(capsys, "hsdag_ray.measure", "--model", "tiny_cnn", "--placement", "auto",
                          "--repeats", "3", "--precision", "0", "--json")
    assert code == 0, err
    res = json.loads(text)["measurement"]
    assert res["ok"] and res["latency_s"] > 0 and res["info"]["execution_devices"] == ["CPU"]
    code, _, err = cli_here(capsys, "hsdag_ray.measure", "--model", "tiny_cnn", "--placement", "auto",
                       "--backend", "simulator")
    assert_user_error(code, err, "AUTO", "simulator")
    code, _, err = cli_here(capsys, "hsdag_ray.measure", "--model", "tiny_cnn", "--placement", "auto",
                       "--backend", "hetero")
    assert_user_error(code, err, "AUTO", "--backend hetero")
    code, _, err = cli_here(capsys, "hsdag_ray.measure", "--model", "tiny_cnn", "--placement", "auto",
                       "--devices", "CPU,NPU9")
    assert_user_error(code, err, "NPU9")

def test_solve_a_model_with_a_profile_then_measure_the_placement(tmp_path, capsys):
    from hsdag_core.device_profile import Profile, add_modeled_device

    _, fine, _, _ = build_graph("tiny_cnn", "none")
    prof = Profile("tiny_cnn", {}, {})
    add_modeled_device(prof, fine, "CPU_MODEL")
    add_modeled_device(prof, fine, "GPU_MODEL")
    prof.save(tmp_path / "p.json")
    out = tmp_path / "opt.json"
    code, text, err = cli_here(capsys, "hsdag_ray.solve", "--model", "tiny_cnn", "--profile", str(tmp_path / "p.json"),
                          "--objective", "sequential", "--method", "mincut", "--out", str(out))
    assert code == 0, err
    assert "optimal" in text
    placement = json.loads(out.read_text())["placement"]
    assert set(placement) == {op for n in fine.nodes for op in n.ops}
    code, text, err = cli_here(capsys, "hsdag_ray.measure", "--model", "tiny_cnn", "--backend", "simulator",
                          "--profile", str(tmp_path / "p.json"), "--placement", str(out), "--json")
    assert code == 0, err
    solved = json.loads(out.read_text())["value_s"]
    assert json.loads(text)["measurement"]["latency_s"] == pytest.approx(solved)
    code, _, err = cli_here(capsys, "hsdag_ray.solve", "--model", "tiny_cnn", "--objective", "sequential",
                       "--method", "mincut")
    assert_user_error(code, err, "--profile")


@pytest.mark.parametrize("frac", ["7", "0", "1", "-0.5", "1.0"])
def test_measure_split_outside_zero_one_is_refused(frac, capsys):
    code, _, err = cli_here(capsys, "hsdag_ray.measure", "--model", "tiny_cnn", "--placement", f"split:{frac}")
    assert_user_error(code, err, f"split:{frac}", "between 0 and 1")


def dynamic_ir(folder) -> str:
    """A small conv net saved as OpenVINO IR with a dynamic input shape."""
    import numpy as np
    import openvino as ov
    from openvino import opset13 as ops

    x = ops.parameter(ov.PartialShape([-1, 3, -1, -1]), ov.Type.f32, name="x")
    rng = np.random.default_rng(0)
    h = x
    for k, (cin, cout) in enumerate([(3, 8), (8, 8), (8, 16)]):
        w = ops.constant(rng.normal(size=(cout, cin, 3, 3)).astype(np.float32))
        h = ops.relu(ops.convolution(h, w, [1, 1], [1, 1], [1, 1], [1, 1]))
    y = ops.reduce_mean(h, ops.constant(np.array([2, 3], dtype=np.int64)), keep_dims=False)
    path = str(folder / "dyn.xml")
    ov.save_model(ov.Model([y], [x], "dyn"), path)
    return path


@pytest.mark.slow
def test_train_takes_input_shape_like_graph_and_profile(tmp_path):
    # a dynamic model: without --input-shape train says to pass it, with it the run goes
    model = dynamic_ir(tmp_path)
    common = ("--model", model, "--backend", "simulator", "--devices", "CPU,GPU_MODEL",
              "--wandb", "disabled", "--env-runners", "0", "--out", str(tmp_path / "runs"))
    code, _, err = cli("hsdag_ray.train", *common, "--budget", "20")
    assert_user_error(code, err, "--input-shape")
    code, text, err = cli("hsdag_ray.train", *common, "--budget", "20", "--episode-len", "10",
                          "--input-shape", "1,3,16,16", "--name", "dyn")
    assert code == 0, err[-3000:]
    summary = json.loads((tmp_path / "runs" / "dyn" / "summary.json").read_text())
    assert summary["placements"] >= 20 and summary["best_latency_s"] > 0


@pytest.mark.parametrize("cpu", ["CPU", "CPU_MODEL"])
def test_the_result_table_compares_with_the_cpu_alone(cpu):
    """The last column is relative to the CPU alone, real (CPU) or modeled (CPU_MODEL)."""
    from rich.console import Console

    from hsdag_ray.console import result_table

    summary = {"model": "m", "method": "hsdag", "backend": "simulator", "best_latency_s": 0.5e-3,
               "devices": [cpu, "GPU"],
               "baselines": {f"{cpu}_only": 1e-3, "GPU_only": None, "optimum": 0.4e-3}}
    console = Console(width=120, record=True)
    console.print(result_table(summary))
    text = console.export_text()
    assert f"vs {cpu}_only" in text
    assert "50.0% faster" in text and "60.0% faster" in text and "0.0% faster" in text
    assert "latency" in text and "time per sample" not in text
    console.print(result_table({**summary, "objective": "throughput"}))
    assert "time per sample" in console.export_text()  # a pipeline's figure, named as such


@pytest.mark.parametrize("measured", [True, False])
def test_the_exact_placement_is_called_the_optimum_only_where_the_profile_is_measured(measured):
    """On a real machine or with --sim-profile the exact solver's placement on the profile
    can be beaten (the progress line once read "0.608x optimum"): it is named for what it is."""
    from rich.console import Console

    from hsdag_ray.console import Progress, optimum_label, result_table

    summary = {"model": "m", "method": "hsdag", "backend": "simulator", "best_latency_s": 0.3e-3,
               "devices": ["CPU", "GPU"], "profile_measured": measured,
               "baselines": {"CPU_only": 1e-3, "optimum": 0.4e-3}}
    console = Console(width=120, record=True)
    console.print(result_table(summary))
    rows = [line.split()[0:3] for line in console.export_text().splitlines()]
    assert (["optimum", "│", "0.400"] in rows) == measured
    assert (["exact", "on", "profile"] in rows) != measured
    line = Progress(10, 0, quiet=True, optimum_s=0.4e-3,
                    optimum_label=optimum_label(measured))._text(
        {"best_latency_s": 0.3e-3, "measurements": 3, "placements": 3})
    assert ("0.750x optimum" in line) == measured and ("0.750x exact on profile" in line) != measured


def test_what_libraries_print_on_either_stream_goes_to_the_log(tmp_path, capfd):
    """Lines written straight to file descriptors 1 and 2 (as C libraries such as
    HiGHS and Ray's core worker do) land in the log; the command's own lines do not."""
    import os

    from hsdag_ray import console

    log = tmp_path / "libraries.log"
    with console.libraries_to(log):
        os.write(1, b"a library on stdout\n")
        os.write(2, b"a library on stderr\n")
        console.say(False)("the command's own line")
    out, err = capfd.readouterr()
    assert "the command's own line" in err and "the command's own line" not in log.read_text()
    assert "a library on stdout" in log.read_text() and "a library on stderr" in log.read_text()
    assert "a library" not in out + err
    os.write(1, b"after\n")  # both streams are back on the console
    assert "after" in capfd.readouterr().out and "after" not in log.read_text()


def test_a_command_can_reword_a_settings_help_and_only_an_existing_ones():
    from hsdag_ray.arguments import build_parser

    ap = build_parser(help_for={"budget": "placements of reinforcement"})
    assert "placements of reinforcement" in ap.format_help()
    assert getattr(ap.parse_args(["--budget", "7"]), "run.budget") == 7
    with pytest.raises(ValueError, match="no setting named budgett"):
        build_parser(help_for={"budgett": "typo"})


@pytest.mark.slow
def test_a_run_that_failed_before_it_started_can_be_run_again_under_its_name(tmp_path):
    """A model that cannot be built fails the run with exit 2, leaving only what the
    libraries printed; the same command, run again after a fix, is not refused for
    its folder. A folder holding a started run's files still is."""
    args = ("hsdag_ray.train", "--model", "hf:patchtst", "--budget", "5", "--out", str(tmp_path),
            "--name", "r", "--wandb", "disabled")
    for _ in range(2):
        code, _, err = cli(*args)
        assert code == 2 and "Traceback" not in err, err
        assert "error: hf:patchtst reads 'past_values'" in err.strip().splitlines()[-1], err
    (tmp_path / "r" / "metrics.jsonl").write_text("{}\n")
    code, _, err = cli(*args)
    assert_user_error(code, err, "exists already", "--resume")
