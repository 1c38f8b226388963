"""The same seed gives the same figures: short fixed-seed simulator runs of every method,
pinned to the figures recorded in ``tests/data/pinned_figures.json``.

Every method is run where it runs: in this process (:func:`hsdag_ray.run.inprocess.run_method`:
HSDAG, the RNN placer, GDP by REINFORCE, the searches and the solvers), through ``train`` (every registered method, its
``metrics.jsonl`` and every measurement's latency), and device-set fine-tuning
(:func:`policies.gdp.device_training.finetune`). The runs measure on memory-limited
devices, so the repair, the cache and the budget all decide what is measured. A change
that is meant to change what a method measures re-records the file::

    HSDAG_RECORD_PINNED=1 python -m pytest tests/test_pinned_figures.py -m "slow or not slow"

and says why in its commit.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest

from test_inprocess import crossed_profile, layered_cnn

pytestmark = pytest.mark.ray  # runs train, sweep, pretrain or Ray itself in this process

DATA = Path(__file__).resolve().parent / "data" / "pinned_figures.json"
RECORD = os.environ.get("HSDAG_RECORD_PINNED") == "1"

#: the metrics.jsonl keys a seed decides (the others are timings)
METRIC_KEYS = ("iteration", "placements", "measurements", "failures", "cache_hits",
               "best_latency_s", "latency_min_s", "latency_mean_s")


def _plain(value):
    """``value`` as JSON writes and reads it back (tuples as lists, numpy as Python)."""
    return json.loads(json.dumps(value, default=float))


def _same(got, want, where: str) -> None:
    if isinstance(want, dict):
        assert set(got) == set(want), where
        for k in want:
            _same(got[k], want[k], f"{where}.{k}")
    elif isinstance(want, list):
        assert len(got) == len(want), f"{where}: {len(got)} entries, pinned {len(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            _same(g, w, f"{where}[{i}]")
    elif isinstance(want, float) and isinstance(got, (int, float)) and math.isfinite(want):
        assert got == pytest.approx(want, rel=1e-9, abs=1e-15), where
    else:
        assert got == want, where


def pin(name: str, figures) -> None:
    """Compare ``figures`` with those pinned under ``name`` (record them with
    ``HSDAG_RECORD_PINNED=1``)."""
    figures = _plain(figures)
    pinned = json.loads(DATA.read_text()) if DATA.is_file() else {}
    if RECORD:
        pinned[name] = figures
        DATA.parent.mkdir(parents=True, exist_ok=True)
        DATA.write_text(json.dumps(pinned, indent=1, sort_keys=True) + "\n")
        return
    assert name in pinned, f"nothing pinned under {name!r}: record with HSDAG_RECORD_PINNED=1"
    _same(figures, pinned[name], name)


# ------------------------------------------------------------------ in this process
@pytest.fixture(scope="module")
def limited():
    """A 16-node layered CNN on a CPU and an accelerator that holds 40% of its weights:
    proposals are repaired before they are measured."""
    from envs.graph_backend import make_backend
    from hsdag_core.device_profile import cost_graph

    graph = layered_cnn(16, c=32, size=16, seed=3)
    prof = crossed_profile(graph, accelerator_memory=0.4, seed=3)
    backend = make_backend("simulator", graph, profile=prof)
    return graph, backend, cost_graph(graph, prof, backend.devices)


INPROCESS = ("hsdag", "rnn", "gdp", "random", "anneal", "refit", "exact", "heft", "m-topo", "m-etf",
             "m-sct")
#: what an in-process run of a method needs (GDP trains by REINFORCE there)
INPROCESS_SETTINGS = {"gdp": {"algo": "reinforce"}}


@pytest.fixture(autouse=True)
def unhurried_refit(monkeypatch):
    """Refit plans each proposal for a wall-clock time (``PLAN_SECONDS``): on a busy
    machine its solves stop earlier and propose other placements. The pins give it time
    enough that every solve ends on its own, so they do not depend on the machine's load."""
    from policies.search import refit

    monkeypatch.setattr(refit, "PLAN_SECONDS", 60.0)


@pytest.mark.parametrize("method", INPROCESS)
def test_an_inprocess_run_measures_what_it_measured_before(limited, method):
    from hsdag_ray.run.inprocess import run_method

    graph, backend, costs = limited
    r = run_method(method, graph, backend, costs, budget=24, seed=1, say=lambda _: None,
                   progress=False, settings=INPROCESS_SETTINGS.get(method))
    pin(f"inprocess/{method}", {k: r[k] for k in ("latency_s", "placement", "measured", "proposed",
                                                   "failures", "curve", "reference_s")})


def test_device_set_finetuning_measures_what_it_measured_before():
    import torch

    from hsdag_core.coarsening import build_graph
    from hsdag_core.device_sets import device_sets
    from policies.gdp.device_net import DeviceGDPNet
    from policies.gdp.device_training import finetune, make_problem, zero_shot
    from policies.gdp.policy import GDPConfig

    graph = build_graph("gen:layered:n=20:c=32:w=4:seed=3", "colocation")[2]
    devset = next(s for s in device_sets("train", 40)
                  if s.size == 3 and any(np.isfinite(s.memory_fraction)))
    p = make_problem(graph, devset, None)
    torch.manual_seed(0)
    net = DeviceGDPNet(p.x.shape[1], GDPConfig(hidden_dim=32))
    greedy, greedy_s = zero_shot(net, p)
    p.forget()
    run = finetune(net, p, budget=24, samples=8, seed=2)
    pin("device_training/finetune", {"best_single_s": p.best_single_s, "zero_shot_s": greedy_s,
                                     "zero_shot": greedy.tolist(), **run})


# ------------------------------------------------------------------ through train
def _trained(method: str, profile: Path, out: Path) -> dict:
    from hsdag_ray.run.config import TrainConfig
    from hsdag_ray.run.training import train

    cfg = TrainConfig.of(model="tiny_cnn", method=method, backend="simulator", profile=str(profile),
                      budget=20, episode_len=5, env_runners=0, hidden_dim=16, wandb="disabled",
                      out=str(out), name=method, seed=0)
    s = train(cfg, quiet=True)
    rows = [json.loads(line) for line in (out / method / "metrics.jsonl").read_text().splitlines()]
    _check_curve(out / method / "curve.jsonl", s)
    return {"metrics": [{k: r.get(k) for k in METRIC_KEYS} for r in rows],
            "latencies_s": s["latencies_s"], "method_best_latency_s": s["method_best_latency_s"],
            "measurements": s["measurements"], "placements": s["placements"]}


def _check_curve(path: Path, summary: dict) -> list[dict]:
    """``curve.jsonl`` has one row per measurement (cached repeats are none), its best is the
    running minimum of the measured latencies, and its clock only moves forward."""
    curve = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["measurement"] for r in curve] == list(range(1, summary["measurements"] + 1))
    best, seen = [r["best_latency_s"] for r in curve], math.inf
    for r, latency in zip(curve, summary["latencies_s"]):
        seen = min(seen, latency if latency is not None else math.inf)
        assert r["latency_s"] == latency and r["best_latency_s"] == (seen if seen < math.inf else None)
    assert all(b is None or a is None or b <= a for a, b in zip(best, best[1:]))
    walls = [r["wall_s"] for r in curve]
    assert walls == sorted(walls) and walls[0] > 0 and walls[-1] <= summary["wall_s"]
    assert summary["measured_at_s"] == walls
    return curve


def test_a_run_of_ten_measurements_has_a_curve_of_one_row_per_measurement(four_device_profile,
                                                                          tmp_path):
    """The best after every measurement: a run's iterations (7 placements each here) end at
    other counts than 10, and its best after 10 measurements is read off the curve, as the
    benches read it."""
    from bench.learning_curves import best_at, measured_curve
    from hsdag_ray.run.config import TrainConfig
    from hsdag_ray.run.training import train

    cfg = TrainConfig.of(model="tiny_cnn", method="anneal", backend="simulator",
                      profile=str(four_device_profile),
                      budget=10, budget_unit="measurements", episode_len=7, env_runners=0,
                      wandb="disabled", out=str(tmp_path), name="ten", seed=0)
    s = train(cfg, quiet=True)
    curve = _check_curve(tmp_path / "ten" / "curve.jsonl", s)
    assert len(curve) == s["measurements"] > 10  # the iteration that reached 10 ends after it
    first_ten = [x for x in s["latencies_s"][:10] if x is not None]
    assert curve[9]["best_latency_s"] == min(first_ten)
    bench = measured_curve(s)
    assert [(n, b, w) for n, b, w in bench] == [(r["measurement"], r["best_latency_s"], r["wall_s"])
                                                for r in curve]
    assert best_at(bench, 10, 1.0) == min(first_ten)


@pytest.mark.parametrize("method", ["random", "refit", "m-etf"])
def test_a_training_run_writes_the_metrics_it_wrote_before(method, four_device_profile, tmp_path):
    pin(f"train/{method}", _trained(method, four_device_profile, tmp_path))


@pytest.mark.slow
@pytest.mark.parametrize("method", ["hsdag", "placeto", "rnn", "gdp", "anneal", "exact", "heft",
                                    "m-topo", "m-sct"])
def test_every_other_methods_training_run_writes_the_metrics_it_wrote_before(method, four_device_profile,
                                                                              tmp_path):
    pin(f"train/{method}", _trained(method, four_device_profile, tmp_path))
