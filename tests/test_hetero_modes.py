"""OpenVINO's own HETERO splits as baselines: real OpenVINO on the two CPU devices (CPU and
the virtual CPU_F32), tiny_cnn."""
import json
import math

import pytest

from envs.base import TimingConfig
from envs.openvino.auto import HETERO_MODES, measure_hetero_mode
from hsdag_ray.apply import main as apply_main, table
from hsdag_ray.run.results import baseline_rows, markdown

FAST = TimingConfig(warmup=1, repeats=3, precision=0, block=1, validate_outputs=False)


@pytest.mark.parametrize("mode", ["hetero_auto", "hetero_pipeline"])
def test_each_mode_runs_on_cpu_and_cpu_f32(mode):
    m = measure_hetero_mode("tiny_cnn", ["CPU", "CPU_F32"], mode, FAST)
    assert m.ok, m.error
    assert m.backend == "openvino-" + mode.replace("_", "-")
    assert m.info["hetero_device"] == "HETERO:CPU,CPU_F32" and m.info["mode"] == mode
    assert 0 < m.latency_s < 1 and len(m.samples_s) == 3
    assert set(m.info["execution_devices"]) <= {"CPU", "CPU_F32"}


def test_a_mode_that_cannot_run_is_a_failed_measurement_saying_why():
    for mode in HETERO_MODES:
        m = measure_hetero_mode("tiny_cnn", ["CPU", "NOPE"], mode, FAST)
        assert not m.ok and m.stage == "validate" and "unknown device 'NOPE'" in m.error
    with pytest.raises(ValueError, match="unknown HETERO mode"):
        measure_hetero_mode("tiny_cnn", ["CPU"], "hetero_magic", FAST)


def test_apply_table_has_both_rows(tmp_path, capsys):
    out = tmp_path / "apply.json"
    assert apply_main(["--model", "tiny_cnn", "--placement", "all:CPU", "--devices", "CPU,CPU_F32",
                       "--warmup", "1", "--repeats", "3", "--precision", "0", "--block", "1", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    res = json.loads(out.read_text())
    assert set(res["hetero"]) == {"hetero_auto", "hetero_pipeline"}
    for mode, row in res["hetero"].items():
        assert row["ok"], row
        assert row["info"]["hetero_device"] == "HETERO:CPU,CPU_F32"
        assert row["placement_speedup"] == pytest.approx(row["latency_s"] / res["placed"]["latency_s"])
    assert {row["name"] for row in res["hetero"].values()} == {"OpenVINO HETERO (default)",
                                                               "OpenVINO HETERO pipeline"}
    # the 80-column table may wrap a row's name onto a second line
    assert text.count("OpenVINO HETERO") == 2 and "(default)" in text and "pipeline" in text
    # a failed mode is a row saying why, not a crash
    res["hetero"]["hetero_pipeline"] = {"name": "OpenVINO HETERO pipeline", "ok": False,
                                        "stage": "compile", "error": "no memory", "info": {}}
    from rich.console import Console

    console = Console(width=200, record=True)
    console.print(table(res))
    assert "compile: no memory" in console.export_text()


def test_sweep_tables_name_the_modes_and_why_one_failed():
    run = {"kind": "run", "model": "tiny_cnn", "backend": "openvino-auto", "devices": "CPU,CPU_F32",
           "cpu_only_s": 1e-3, "optimum_s": None, "optimum_proven": None}
    summary = {"baselines": {"CPU_only": 1e-3, "hetero_auto": 1.1e-3, "hetero_pipeline": math.inf},
               "baselines_failed": {"hetero_pipeline": "compile: not enough memory"}}
    rows = {r["method"]: r for r in baseline_rows([run], [summary])}
    assert rows["OpenVINO HETERO (default)"]["best_latency_s"] == pytest.approx(1.1e-3)
    failed = rows["OpenVINO HETERO pipeline"]
    assert failed["best_latency_s"] is None
    assert failed["best_source"] == "failed: compile: not enough memory"
    table_md = markdown(list(rows.values()))
    assert "| tiny_cnn | OpenVINO HETERO pipeline | - | failed: compile: not enough memory |" in table_md
