"""A pre-trained policy's placements fit the devices (zero-shot and the first placement of
fine-tuning), and fine-tuning measures the policy's greedy placement first."""
import json

import pytest

from envs.store import placement_key
from hsdag_ray.run.config import TrainConfig
from hsdag_core.fit import feasible
from hsdag_ray.run.pretraining import pretrain
from hsdag_ray.run.pretrained import (build_module, first_placement, infer_placements, read_pretrained,
                                  save_pretrained)
from policies.registry import get, load

pytestmark = pytest.mark.ray  # runs train, sweep, pretrain or Ray itself in this process

HELD_OUT = "gen:layered:n=11:c=32:w=2:seed=100"


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """A pre-trained HSDAG policy, and the same weights with every node's logits pushed to the
    accelerator (which holds only half the graph's weights): its greedy placement overflows."""
    root = tmp_path_factory.mktemp("first")
    pre = root / "tiny-hsdag"
    pretrain(TrainConfig.of(method="hsdag", budget=30, episode_len=5, env_runners=0, hidden_dim=16,
                         seed=0, incumbent_prior=0.0), "tiny", pre, say=lambda s: None, imitate_steps=5)
    ckpt = read_pretrained(pre)
    graphs = json.loads((pre / "graphs.json").read_text())
    accelerator = graphs["devices"].index("GPU_PARTMEM")
    meta = {k: v for k, v in ckpt.items() if k != "state_dict"}
    meta["model_config"] = {**meta["model_config"], "prior_device": accelerator, "prior_logit": 50.0}
    env = _env(pre)
    module = build_module({**ckpt, **meta}, get("hsdag"), env)
    overflowing = root / "overflowing"
    save_pretrained(overflowing, module, meta)
    (overflowing / "graphs.json").write_text((pre / "graphs.json").read_text())
    return pre, overflowing, accelerator


def _cfg(pre, **kw) -> TrainConfig:
    graphs = json.loads((pre / "graphs.json").read_text())
    profile = next(g["profile"] for g in graphs["held_out"] if g["spec"] == HELD_OUT)
    base = dict(model=HELD_OUT, backend="simulator", devices=list(graphs["devices"]), profile=profile,
                init=str(pre), env_runners=0, hidden_dim=16, episode_len=5, wandb="disabled",
                remeasure_rounds=1)
    return TrainConfig.of(**{**base, **kw})


def _env(pre):
    from hsdag_ray.run.pretrained import adopt_settings
    from hsdag_ray.run.resolve import env_config, resolve_backend

    cfg = adopt_settings(_cfg(pre), read_pretrained(pre))
    backend, devices, profile = resolve_backend(cfg, lambda s: None)
    return load(get("hsdag").env)(env_config(cfg, backend, devices, profile, ""))


def test_zero_shot_placements_fit_the_accelerators_memory(checkpoints):
    _, overflowing, acc = checkpoints
    env = _env(overflowing)
    limits = env.limits
    module = build_module(read_pretrained(overflowing), get("hsdag"), env)
    raw = infer_placements(module, env, 10, seed=0, fit=False)
    assert (raw[0] == acc).all() and not feasible(limits, raw[0])  # what is to be mended
    placed = infer_placements(module, env, 10, seed=0)
    assert len(placed) == 10 and all(feasible(limits, p) for p in placed)
    # the greedy placement is repaired, not replaced: only nodes leave the accelerator
    moved = placed[0] != raw[0]
    assert moved.any() and (raw[0][moved] == acc).all() and (placed[0][moved] != acc).all()
    assert (placed[0] == acc).sum() > 0


def test_a_zero_shot_run_measures_no_overflowing_placement(checkpoints, tmp_path):
    from hsdag_ray.run.training import train

    _, overflowing, _ = checkpoints
    cfg = _cfg(overflowing, budget=0, zero_shot_samples=4, name="zs").replace(out=str(tmp_path))
    s = train(cfg, quiet=True)
    log = json.loads((tmp_path / "zs" / "store.json").read_text())["log"]
    assert s["placements"] >= 1 and log and all(e["ok"] for e in log)


@pytest.mark.parametrize("delay", [0.0, 0.002], ids=["simulator", "measuring_slots"])
@pytest.mark.slow
def test_fine_tuning_measures_the_greedy_placement_first(checkpoints, tmp_path, delay):
    """First in the log: the policy's greedy placement (repaired to fit), counted in the
    budget. With a measuring time the simulator stands for real devices: the placement is
    measured on a measuring slot, before the EnvRunner (which holds the only slot) starts."""
    from hsdag_ray.run.training import train

    _, overflowing, _ = checkpoints
    env_runners = 1 if delay else 0
    cfg = _cfg(overflowing, budget=12, sim_delay_s=delay, name="ft",
                                   env_runners=env_runners).replace(out=str(tmp_path))
    s = train(cfg, quiet=True)
    env = _env(overflowing)
    expected = first_placement(read_pretrained(overflowing), get("hsdag"), env.config.to_dict(), False)
    assert feasible(env.limits, expected)
    log = json.loads((tmp_path / "ft" / "store.json").read_text())["log"]
    assert log[0]["key"] == placement_key(env.graph_id, expected) and log[0]["ok"]
    assert 12 <= s["placements"] <= 12 + 5 * 2  # the budget counts it: at most one iteration over
    rows = [json.loads(x) for x in (tmp_path / "ft" / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["best_latency_s"] <= log[0]["latency_s"]


@pytest.mark.parametrize("which", [0, 1], ids=["pretrained", "overflowing"])
def test_fine_tuning_measures_the_runs_start_after_the_greedy_placement(checkpoints, tmp_path, which):
    """Second in the log: the run's start (the fastest single device, repaired to fit),
    unless it is the greedy placement itself, so a fine-tuning run's best is never worse
    than the best single device whatever the checkpoint places; measured once either way."""
    import numpy as np

    from envs.incumbent import start_placement
    from hsdag_ray.run.training import train

    pre = checkpoints[which]
    cfg = _cfg(pre, budget=6, name="st").replace(out=str(tmp_path))
    s = train(cfg, quiet=True)
    env = _env(pre)
    greedy = first_placement(read_pretrained(pre), get("hsdag"), env.config.to_dict(), False)
    start = start_placement(env.graph.num_nodes, env.devices, env.single_device_s, env.repair_limits)
    log = json.loads((tmp_path / "st" / "store.json").read_text())["log"]
    keys = [e["key"] for e in log]
    assert keys[0] == placement_key(env.graph_id, greedy)
    # the pre-trained policy moves nodes off the start; the overflowing one's greedy
    # placement, repaired, is the start (the accelerator with what overflows moved off)
    assert np.array_equal(greedy, start) == (which == 1)
    assert keys.count(placement_key(env.graph_id, start)) == 1
    if which == 0:
        assert keys[1] == placement_key(env.graph_id, start)
    assert s["best_latency_s"] <= min(log[0]["latency_s"], log[1]["latency_s"])


def test_a_softened_fine_tuning_run_still_measures_the_checkpoints_greedy_placement_first(
        checkpoints, tmp_path):
    """--init-soften spreads the run's policy after loading, not the placement measured first."""
    from hsdag_ray.run.training import train

    pre, _, _ = checkpoints
    cfg = _cfg(pre, budget=6, init_soften=0.3, name="soft").replace(out=str(tmp_path))
    train(cfg, quiet=True)
    env = _env(pre)
    expected = first_placement(read_pretrained(pre), get("hsdag"), env.config.to_dict(), False)
    log = json.loads((tmp_path / "soft" / "store.json").read_text())["log"]
    assert log[0]["key"] == placement_key(env.graph_id, expected)


@pytest.mark.slow  # the same order with measuring slots stays in CI
def test_fine_tuning_on_real_openvino_devices_measures_the_greedy_placement_first(checkpoints, tmp_path):
    """Real OpenVINO (CPU bf16 + CPU f32) with one real EnvRunner holding the machine's only
    measuring slot: the greedy placement is measured first and the run does not wait forever.
    The profile gives CPU_F32 a memory limit so that the checkpoint's memory features exist."""
    import subprocess
    import sys

    from hsdag_core.device_profile import Profile
    from hsdag_ray.run.training import train

    pre, _, _ = checkpoints
    prof = tmp_path / "tiny.json"
    r = subprocess.run([sys.executable, "-m", "hsdag_ray.profile", "--model", "tiny_cnn", "--devices",
                        "CPU,CPU_F32", "--fit", "0", "--out", str(prof)], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    profile = Profile.load(prof)
    profile.mem_capacity["CPU_F32"] = 20000.0
    profile.save(prof)
    cfg = TrainConfig.of(model="tiny_cnn", backend="auto", devices=["CPU", "CPU_F32"], profile=str(prof),
                      init=str(pre), budget=6, env_runners=1, episode_len=5, wandb="disabled",
                      remeasure_rounds=1, out=str(tmp_path), name="ov")
    s = train(cfg, quiet=True)
    log = json.loads((tmp_path / "ov" / "store.json").read_text())["log"]
    env = json.loads((tmp_path / "ov" / "config.json").read_text())
    assert s["placements"] >= 6 and log[0]["ok"] and env["resolved"]["env_runners"] == 1
    from hsdag_ray.run.pretrained import adopt_settings
    from hsdag_ray.run.resolve import env_config, resolve_backend

    cfg = adopt_settings(cfg, read_pretrained(pre))
    backend, devices, profile_json = resolve_backend(cfg, lambda s: None)
    env_cfg = env_config(cfg, backend, devices, profile_json, "")
    expected = first_placement(read_pretrained(pre), get("hsdag"), env_cfg, True)
    graph_id = log[0]["key"].rsplit(":", 1)[0]
    assert log[0]["key"] == placement_key(graph_id, expected)
