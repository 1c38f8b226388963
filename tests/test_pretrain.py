"""Pre-training on a family, fine-tuning from the checkpoint (train --init), zero-shot (--budget 0)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hsdag_ray.cli import UsageError
from hsdag_ray.run.config import TrainConfig
from hsdag_ray.run.pretraining import pretrain
from hsdag_ray.run.pretrained import CHECKPOINT_FILE, read_pretrained

pytestmark = pytest.mark.ray  # runs train, sweep, pretrain or Ray itself in this process

ROOT = Path(__file__).resolve().parents[1]
HELD_OUT = "gen:layered:n=11:c=32:w=2:seed=100"


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    out = tmp_path_factory.mktemp("pre") / "tiny-hsdag"
    meta = pretrain(TrainConfig.of(method="hsdag", budget=60, episode_len=5, env_runners=0,
                                hidden_dim=16, seed=0, incumbent_prior=0.0), "tiny", out, say=lambda s: None,
                    imitate_steps=20)
    return out, meta


def test_pretrain_writes_a_checkpoint_over_every_training_graph(pretrained):
    out, meta = pretrained
    ckpt = read_pretrained(out)
    assert ckpt["method"] == "hsdag" and ckpt["family"] == "tiny"
    assert ckpt["model_config"]["hidden_dim"] == 16
    assert meta["placements"] >= 60
    # the optima were imitated first; the run's reward and features are the scale-free ones
    assert meta["imitation"]["steps"] == 20 and meta["imitation"]["demonstrations"] == 4
    assert meta["imitation"]["loss_after"] < meta["imitation"]["loss_before"]
    assert ckpt["reward"] == "speedup"
    counts = [g["placements"] for g in meta["per_graph"]]
    assert len(counts) == 4 and sum(counts) == meta["placements"] and sum(c > 0 for c in counts) >= 2
    graphs = json.loads((out / "graphs.json").read_text())
    assert HELD_OUT in {g["spec"] for g in graphs["held_out"]}
    assert all(Path(g["profile"]).is_file() for g in graphs["held_out"] + graphs["train"])


def _held_out_cfg(out, **kw):
    graphs = json.loads((out / "graphs.json").read_text())
    profile = next(g["profile"] for g in graphs["held_out"] if g["spec"] == HELD_OUT)
    base = dict(model=HELD_OUT, backend="simulator", devices=list(graphs["devices"]), profile=profile,
                init=str(out), env_runners=0, hidden_dim=16, episode_len=5, wandb="disabled")
    return TrainConfig.of(**{**base, **kw})


@pytest.mark.own_ray
def test_init_loads_the_weights_into_the_learner_and_the_env_runner(pretrained):
    import ray

    from hsdag_ray.run.algos import algo_config
    from hsdag_ray.run.pretrained import adopt_settings, load_into_algo
    from hsdag_ray.run.resolve import env_config, resolve_backend
    from policies.registry import get

    out, _ = pretrained
    ckpt = read_pretrained(out / CHECKPOINT_FILE)
    cfg = adopt_settings(_held_out_cfg(out), ckpt)  # as train --init: the checkpoint's settings
    backend, devices, profile = resolve_backend(cfg, lambda s: None)
    env_cfg = env_config(cfg, backend, devices, profile, "")
    ray.init(address="local", include_dashboard=False, num_cpus=1, log_to_driver=False)
    try:
        algo = algo_config(cfg, get("hsdag"), env_cfg, False, cfg.learning.episode_len).build_algo()
        before = {k: v.clone() for k, v in algo.get_module().state_dict().items()}
        load_into_algo(algo, ckpt, "hsdag")
        learner = algo.learner_group._learner.module["default_policy"].state_dict()
        runner = algo.get_module().state_dict()
        for k, v in ckpt["state_dict"].items():
            assert torch.equal(learner[k], v)
            if k in runner:
                assert torch.equal(runner[k], v)
        assert any(not torch.equal(before[k], runner[k]) for k in runner)
        with pytest.raises(UsageError, match="holds a hsdag policy"):
            load_into_algo(algo, ckpt, "placeto")
        wrong = {**ckpt, "state_dict": {k: torch.zeros(3) for k in ckpt["state_dict"]}}
        with pytest.raises(UsageError, match="of shape"):
            load_into_algo(algo, wrong, "hsdag")
        algo.stop()
    finally:
        ray.shutdown()


def _inference_dist(module, env):
    from ray.rllib.core.columns import Columns

    obs, _ = env.reset(seed=0)
    batch = {Columns.OBS: {k: torch.as_tensor(v)[None] for k, v in obs.items()}}
    with torch.no_grad():
        out = module.forward_inference(batch)
    return module.action_dist_cls.from_logits(out[Columns.ACTION_DIST_INPUTS])


@pytest.mark.own_ray
@pytest.mark.slow
def test_init_soften_spreads_the_loaded_policy_and_keeps_its_preferences(pretrained):
    """--init-soften: after loading, the learner's and the EnvRunner's policy is spread (higher
    entropy on the held-out graph) and every group still prefers the device it preferred."""
    import ray

    from hsdag_ray.run.algos import algo_config
    from hsdag_ray.run.pretrained import adopt_settings, build_module, load_into_algo
    from hsdag_ray.run.resolve import env_config, resolve_backend
    from policies.registry import get, load

    out, _ = pretrained
    ckpt = read_pretrained(out / CHECKPOINT_FILE)
    cfg = adopt_settings(_held_out_cfg(out, init_soften=0.3), ckpt)
    backend, devices, profile = resolve_backend(cfg, lambda s: None)
    env_cfg = env_config(cfg, backend, devices, profile, "")
    env = load(get("hsdag").env)(env_cfg)
    base = build_module(ckpt, get("hsdag"), env)
    loaded = _inference_dist(base, env)
    ray.init(address="local", include_dashboard=False, num_cpus=1, log_to_driver=False)
    try:
        algo = algo_config(cfg, get("hsdag"), env_cfg, False, cfg.learning.episode_len).build_algo()
        load_into_algo(algo, ckpt, "hsdag", soften=cfg.run.init_soften)
        learner = algo.learner_group._learner.module["default_policy"]
        for module in (learner, algo.get_module()):
            spread = _inference_dist(module, env)
            assert float(spread.entropy().sum()) > float(loaded.entropy().sum()) + 1e-3
            assert torch.equal(spread.logits.argmax(-1), loaded.logits.argmax(-1))
            assert torch.allclose(module.net.placer[-1].weight, 0.3 * base.net.placer[-1].weight)
        algo.stop()
    finally:
        ray.shutdown()


def test_init_soften_is_checked_before_a_run_starts():
    from hsdag_ray.arguments import config_from_args

    with pytest.raises(UsageError, match="pass --init CHECKPOINT with it"):
        config_from_args(["--init-soften", "0.3"])
    for bad in (-0.5, 1.5):
        with pytest.raises(UsageError, match=r"init_soften must be at most 1 \(0: the method's own"):
            TrainConfig.of(init_soften=bad).validate()
    TrainConfig.of(init_soften=0.0).validate()  # the default: the method's own, also without --init


@pytest.mark.slow
def test_budget_zero_places_zero_shot_with_one_measurement(pretrained, tmp_path):
    out, _ = pretrained
    cfg = _held_out_cfg(out)
    args = ["--model", cfg.run.model, "--backend", "simulator", "--devices", ",".join(cfg.env.devices),
            "--profile", cfg.env.profile, "--init", str(out), "--budget", "0", "--hidden-dim", "16",
            "--episode-len", "5", "--env-runners", "0", "--wandb", "disabled",
            "--out", str(tmp_path), "--name", "zs"]
    r = subprocess.run([sys.executable, "-m", "hsdag_ray.train", *args], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    summary = json.loads((tmp_path / "zs" / "summary.json").read_text())
    assert summary["placements"] == 1 and summary["measurements"] == 1
    assert summary["method_best_latency_s"] > 0
    # another method's network: one sentence, exit code 2
    r = subprocess.run([sys.executable, "-m", "hsdag_ray.train", *args[:-2], "--name", "zs2",
                        "--method", "placeto"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "holds a hsdag policy" in r.stderr and "Traceback" not in r.stderr


def test_budget_zero_needs_a_checkpoint():
    from hsdag_ray.arguments import config_from_args

    with pytest.raises(UsageError, match="zero-shot with --init"):
        config_from_args(["--budget", "0"])


@pytest.mark.own_ray
@pytest.mark.slow
def test_zero_shot_measures_only_on_a_machine_with_the_runs_devices(pretrained, tmp_path):
    import ray
    from ray.cluster_utils import Cluster

    from hsdag_ray.run.config import MEASURE_RESOURCE
    from hsdag_ray.run.nodes import devices_resource
    from hsdag_ray.run.training import train

    out, _ = pretrained
    cfg = _held_out_cfg(out, sim_delay_s=0.01, remeasure_rounds=1, zero_shot_samples=3,
                        budget=0, name="pinned")
    cfg = cfg.replace(out=str(tmp_path))
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    try:
        # a measuring machine with other devices first, then the one with the run's
        other = c.add_node(num_cpus=1, resources={MEASURE_RESOURCE: 1,
                                                  devices_resource(["CPU", "GPU"]): 1})
        good = c.add_node(num_cpus=1, resources={MEASURE_RESOURCE: 1,
                                                 devices_resource(cfg.env.devices): 1})
        c.wait_for_nodes()
        ray.init(address=c.run.address)
        s = train(cfg, quiet=True)
        store = json.loads((tmp_path / "pinned" / "store.json").read_text())
        nodes = {e["node"] for e in store["log"]}
        assert s["placements"] >= 1 and store["log"]
        assert nodes == {good.node_id} and other.node_id not in nodes
    finally:
        ray.shutdown()
        c.shutdown()


@pytest.mark.slow
def test_the_pretrain_command_reads_like_a_tool(tmp_path):
    """From the command line: progress lines and the checkpoint folder on the console, what Ray,
    RLlib and torch printed in the folder's libraries.log."""
    r = subprocess.run([sys.executable, "-m", "hsdag_ray.pretrain", "--method", "hsdag", "--family",
                        "tiny", "--budget", "20", "--episode-len", "5", "--hidden-dim", "16",
                        "--imitate-steps", "5", "--out", str(tmp_path)], cwd=tmp_path,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    out = tmp_path / "tiny-hsdag-pretrain"
    assert r.stdout.strip().splitlines()[-1] == str(out)
    console = r.stdout + r.stderr
    assert "imitation:" in console and "pre-trained hsdag on 4 graphs of tiny" in console
    for word in ("Warning", "Traceback", "Token authentication", "gputil"):
        assert word not in console, f"{word!r} on the console:\n{console}"
    assert (out / "libraries.log").stat().st_size > 0 and (out / CHECKPOINT_FILE).is_file()


@pytest.mark.slow
def test_placeto_pretrains_by_imitation_only_unless_a_budget_is_given(tmp_path):
    """After --imitate-steps, Placeto's own pre-training budget is 0 placements of
    reinforcement (its Method.budget_after_imitation; docs/results/transfer.md); an explicit
    --budget still runs them, and without imitation the general default applies."""
    from hsdag_ray.pretrain import main
    from hsdag_ray.run.pretraining import DEFAULT_BUDGET, default_budget

    assert default_budget("placeto", 5) == 0
    assert default_budget("placeto", 0) == DEFAULT_BUDGET  # else nothing would train the policy
    assert default_budget("hsdag", 5) == default_budget("gdp", 5) == DEFAULT_BUDGET
    common = ["--method", "placeto", "--family", "tiny", "--hidden-dim", "16", "--imitate-steps", "5"]
    for name, extra, reinforced in (("own", [], False), ("given", ["--budget", "20"], True)):
        assert main(common + extra + ["--out", str(tmp_path), "--name", name]) == 0
        meta = json.loads((tmp_path / name / "pretrained.json").read_text())
        assert "loss_after" in meta["imitation"]  # the optima were imitated first
        assert (meta["placements"] >= 20) if reinforced else (meta["placements"] == meta["iterations"] == 0)
        assert (tmp_path / name / CHECKPOINT_FILE).is_file()
    with pytest.raises(UsageError, match="pre-trains nothing"):
        main(["--method", "placeto", "--family", "tiny", "--budget", "0"])


@pytest.mark.slow
def test_a_family_can_be_placed_on_the_npu_like_accelerator(tmp_path):
    """--family-accelerator NPU_MODEL: every profile has CPU_MODEL and NPU_MODEL with no memory
    limit, graphs.json and the checkpoint name those devices, and a held-out graph is placed
    zero-shot on them from the command line; an unknown accelerator is one sentence, exit 2."""
    from hsdag_core.device_profile import Profile
    from hsdag_ray.pretrain import main

    common = ["--method", "placeto", "--family", "tiny", "--hidden-dim", "16", "--imitate-steps", "5",
              "--out", str(tmp_path)]
    assert main(common + ["--family-accelerator", "NPU_MODEL", "--name", "npu"]) == 0
    out = tmp_path / "npu"
    graphs = json.loads((out / "graphs.json").read_text())
    assert graphs["devices"] == ["CPU_MODEL", "NPU_MODEL"] == read_pretrained(out)["devices"]
    for g in graphs["train"] + graphs["held_out"]:
        prof = Profile.load(g["profile"])
        assert set(prof.devices) == {"CPU_MODEL", "NPU_MODEL"} and not prof.mem_capacity
    held = graphs["held_out"][0]
    r = subprocess.run([sys.executable, "-m", "hsdag_ray.train", "--model", held["spec"], "--method",
                        "placeto", "--backend", "simulator", "--devices", "CPU_MODEL,NPU_MODEL",
                        "--profile", held["profile"], "--init", str(out), "--budget", "0",
                        "--hidden-dim", "16", "--env-runners", "0", "--wandb", "disabled",
                        "--out", str(tmp_path), "--name", "zs"], cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads((tmp_path / "zs" / "summary.json").read_text())["measurements"] == 1
    r = subprocess.run([sys.executable, "-m", "hsdag_ray.pretrain", *common, "--family-accelerator",
                        "TPU"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "unknown --family-accelerator 'TPU'" in r.stderr
    assert "NPU_MODEL" in r.stderr and "Traceback" not in r.stderr


def test_bench_transfer_places_named_graphs_outside_the_family(pretrained):
    """``bench_transfer.py --graphs``: zero-shot on any model specs instead of the family's
    held-out graphs, each against its own exact optimum."""
    from bench.bench_transfer import zero_shot_rows

    out, _ = pretrained
    named = ["gen:layered:n=9:c=16:w=2:seed=7", "gen:cell:cells=1:b=3:c=16:seed=5"]
    rows = zero_shot_rows("hsdag", out, "tiny", {"hidden_dim": 16, "incumbent_prior": 0.0}, seeds=2,
                          graphs=named)
    assert [r["graph"] for r in rows] == named
    for r in rows:
        assert r["nodes"] >= 2 and r["optimum_s"] > 0
        # nothing beats the exact optimum; the best of 10 is at least as good as the greedy one
        assert 1 - 1e-9 <= r["zero_shot_10"] <= r["zero_shot_1"]
        assert r["best_single"] >= 1 - 1e-9


def test_bench_transfer_names_fine_tuning_runs_by_their_settings():
    """``--reuse`` reads back a fine-tuning run by its folder name: runs with other
    ``--finetune-set`` settings must not share it."""
    from bench.bench_transfer import run_name

    plain = run_name("hsdag", "scratch", 1.0, "hf:gpt_neo:num_layers=4", 0)
    assert plain == "hsdag-scratch-hf_gpt_neo_num_layers=4-0"  # as before the settings joined it
    alone = run_name("hsdag", "scratch", 1.0, "hf:gpt_neo:num_layers=4", 0, {"neighbour_every": 0})
    assert alone != plain and alone.endswith("-neighbour_every=0")
    assert run_name("gdp", "softened", 0.2, "bert_base", 1) == "gdp-soften0.2-bert_base-1"


@pytest.mark.slow
def test_a_policy_pretrained_without_graphnorm_is_fine_tuned_without_it(tmp_path):
    """--no-graph-norm in pre-training: the checkpoint's network has no GraphNorm, and
    train --init adopts the setting (a run naming --graph-norm is refused in one sentence)."""
    from hsdag_ray.run.pretrained import adopt_settings, build_module
    from hsdag_ray.run.training import train
    from policies.registry import get

    out = tmp_path / "pre"
    pretrain(TrainConfig.of(method="hsdag", budget=0, episode_len=5, env_runners=0, hidden_dim=16, seed=0,
                         incumbent_prior=0.0, graph_norm=False), "tiny", out, say=lambda s: None,
             imitate_steps=5)
    ckpt = read_pretrained(out)
    assert ckpt["settings"]["hsdag.graph_norm"] is False and ckpt["model_config"]["graph_norm"] is False
    assert not any("graph_norms" in k for k in ckpt["state_dict"])
    graphs = json.loads((out / "graphs.json").read_text())
    profile = next(g["profile"] for g in graphs["held_out"] if g["spec"] == HELD_OUT)
    base = dict(model=HELD_OUT, backend="simulator", devices=list(graphs["devices"]), profile=profile,
                init=str(out), env_runners=0, episode_len=5, wandb="disabled", out=str(tmp_path))
    assert adopt_settings(TrainConfig.of(**base), ckpt).hsdag.graph_norm is False
    s = train(TrainConfig.of(**base, budget=6, name="ft"), quiet=True)
    assert s["placements"] >= 6
    # a run that names GraphNorm itself gets a network the checkpoint does not fit
    from hsdag_ray.run.resolve import env_config, resolve_backend
    from policies.registry import load

    cfg = adopt_settings(TrainConfig.of(**base), ckpt)
    backend, devices, prof = resolve_backend(cfg, lambda s: None)
    env = load(get("hsdag").env)(env_config(cfg, backend, devices, prof, ""))
    with pytest.raises(UsageError, match="network differs.*graph_norms"):
        build_module({**ckpt, "model_config": {**ckpt["model_config"], "graph_norm": True}},
                     get("hsdag"), env)
