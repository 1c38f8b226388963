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
    bad = tmp_path / "bad.json"
    missing = tmp_path / "nope.json"
    cases = [  # (graph, objective, method, more arguments, the words of the one-line error)
        (missing, "throughput", "dp", [], "no such file"),
        ("{not json", "throughput", "dp", [], "not valid JSON"),
        (json.dumps({"maxFPGAs": 1, "maxCPUs": 1, "nodes": [], "edges": []}), "throughput", "dp",
         [], "maxSizePerFPGA"),
        (small_input, "throughput", "magic", [], "unknown method"),
        (small_input, "fast", "dp", [], "invalid choice"),
        (small_input, "parallel", "dp", [], "does not solve the parallel"),
        (small_input, "sequential", "mincut", [], "two devices"),
        (small_input, "sequential", "milp", ["--devices", "GPU9"], "unknown device"),
    ]
    for graph, objective, method, more, words in cases:
        if isinstance(graph, str):  # the text of a file that is no valid input
            bad.write_text(graph)
            graph = bad
        code, _, err = run_cli(capsys, "--graph", str(graph), "--objective", objective,
                               "--method", method, *more)
        assert_user_error(code, err, words)


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
