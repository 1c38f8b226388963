"""The ``hsdag_ray.solve`` command line: bad input exits 2 with one sentence, a solve prints and
writes its placement."""
import json
import subprocess
import sys

import pytest

from hsdag_ray.solve import main as solve_main


def run_cli(capsys, *args):
    from hsdag_ray.cli import run
    code = run(solve_main, list(args), prog="hsdag_ray.solve")
    out, err = capsys.readouterr()
    return code, out, err


def assert_user_error(code, err, *words):
    assert code == 2, err
    assert "Traceback" not in err
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, err
    for w in words:
        assert w in lines[0], lines[0]


@pytest.fixture
def small_input(tmp_path):
    from conftest import small_dnnpart

    return small_dnnpart(tmp_path / "small.json")


def test_cli_bad_input_exit_2(capsys, tmp_path, small_input):
    code, _, err = run_cli(capsys, "--graph", str(tmp_path / "nope.json"), "--objective",
                           "throughput", "--method", "dp")
    assert_user_error(code, err, "no such file")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    code, _, err = run_cli(capsys, "--graph", str(bad), "--objective", "throughput",
                           "--method", "dp")
    assert_user_error(code, err, "not valid JSON")
    bad.write_text(json.dumps({"maxFPGAs": 1, "maxCPUs": 1, "nodes": [], "edges": []}))
    code, _, err = run_cli(capsys, "--graph", str(bad), "--objective", "throughput",
                           "--method", "dp")
    assert_user_error(code, err, "maxSizePerFPGA")
    code, _, err = run_cli(capsys, "--graph", str(small_input), "--objective", "throughput",
                           "--method", "magic")
    assert_user_error(code, err, "unknown method")
    code, _, err = run_cli(capsys, "--graph", str(small_input), "--objective", "fast",
                           "--method", "dp")
    assert_user_error(code, err, "invalid choice")
    code, _, err = run_cli(capsys, "--graph", str(small_input), "--objective", "parallel",
                           "--method", "dp")
    assert_user_error(code, err, "does not solve the parallel")
    code, _, err = run_cli(capsys, "--graph", str(small_input), "--objective", "sequential",
                           "--method", "mincut")
    assert_user_error(code, err, "two devices")
    code, _, err = run_cli(capsys, "--graph", str(small_input), "--objective", "sequential",
                           "--method", "milp", "--devices", "GPU9")
    assert_user_error(code, err, "unknown device")


def test_cli_solves_and_writes(capsys, tmp_path, small_input):
    out = tmp_path / "placement.json"
    code, text, _ = run_cli(capsys, "--graph", str(small_input), "--objective", "sequential",
                            "--method", "mincut", "--devices", "CPU0,ACC0", "--out", str(out))
    assert code == 0
    assert "optimal" in text and "bound" in text and "solved in" in text
    doc = json.loads(out.read_text())
    assert set(doc["placement"].values()) <= {"CPU0", "ACC0"}
    code, text, _ = run_cli(capsys, "--graph", str(small_input), "--objective", "throughput",
                            "--method", "dp", "--json")
    d = json.loads(text)
    assert code == 0 and d["optimal"] and d["scope"] == "contiguous"


def test_cli_subprocess_has_no_traceback(small_input):
    r = subprocess.run([sys.executable, "-m", "hsdag_ray.solve", "--graph", str(small_input),
                        "--objective", "throughput", "--method", "nope"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
