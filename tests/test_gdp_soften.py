"""train --init-soften with GDP: a pre-trained policy that samples only its greedy placement is spread."""
import json

import pytest
import torch

from hsdag_ray.run.config import TrainConfig
from hsdag_ray.run.pretraining import pretrain
from hsdag_ray.run.pretrained import read_pretrained

pytestmark = pytest.mark.ray  # runs train, sweep, pretrain or Ray itself in this process

HELD_OUT = "gen:layered:n=11:c=32:w=2:seed=100"


@pytest.fixture(scope="module")
def gdp_pretrained(tmp_path_factory):
    out = tmp_path_factory.mktemp("pre") / "tiny-gdp"
    pretrain(TrainConfig.of(method="gdp", budget=20, episode_len=5, env_runners=0, hidden_dim=16,
                         seed=0), "tiny", out, say=lambda s: None, imitate_steps=20)
    return out


def test_init_soften_spreads_gdp_and_keeps_its_greedy_placement(gdp_pretrained):
    """GDP's soften_policy (what --init-soften calls): every node's logits keep their order."""
    from ray.rllib.core.columns import Columns

    from hsdag_ray.run.pretrained import adopt_settings, build_module
    from hsdag_ray.run.resolve import env_config, resolve_backend
    from policies.registry import get, load

    ckpt = read_pretrained(gdp_pretrained)
    graphs = json.loads((gdp_pretrained / "graphs.json").read_text())
    profile = next(g["profile"] for g in graphs["held_out"] if g["spec"] == HELD_OUT)
    cfg = adopt_settings(TrainConfig.of(method="gdp", model=HELD_OUT, backend="simulator",
                                     devices=list(graphs["devices"]), profile=profile,
                                     init=str(gdp_pretrained), hidden_dim=16, episode_len=5), ckpt)
    backend, devices, prof = resolve_backend(cfg, lambda s: None)
    env = load(get("gdp").env)(env_config(cfg, backend, devices, prof, ""))
    module = build_module(ckpt, get("gdp"), env)
    obs, _ = env.reset(seed=0)
    batch = {Columns.OBS: {k: torch.as_tensor(v)[None] for k, v in obs.items()}}

    def dist():
        with torch.no_grad():
            return module.action_dist_cls.from_logits(module.forward_inference(batch)[Columns.ACTION_DIST_INPUTS])

    before = dist()
    module.soften_policy(0.2)
    after = dist()
    assert float(after.entropy().sum()) > float(before.entropy().sum()) + 1e-3
    assert torch.equal(after.to_deterministic().sample(), before.to_deterministic().sample())


@pytest.mark.own_ray
@pytest.mark.slow
def test_a_gdp_fine_tuning_run_spreads_the_loaded_policy_by_default(gdp_pretrained):
    """train --init with GDP and no --init-soften: the EnvRunner samples from the checkpoint's
    policy spread by GDP's own factor (0.2); --init-soften 1 leaves it as loaded."""

    import ray

    from hsdag_ray.run.drivers import RLDriver
    from hsdag_ray.run.pretrained import adopt_settings, build_module
    from hsdag_ray.run.resolved_run import resolve_run
    from policies.registry import get, load

    ckpt = read_pretrained(gdp_pretrained)
    graphs = json.loads((gdp_pretrained / "graphs.json").read_text())
    profile = next(g["profile"] for g in graphs["held_out"] if g["spec"] == HELD_OUT)
    cfg = adopt_settings(TrainConfig.of(method="gdp", model=HELD_OUT, backend="simulator",
                                     devices=list(graphs["devices"]), profile=profile,
                                     init=str(gdp_pretrained), env_runners=0, hidden_dim=16,
                                     episode_len=5, wandb="disabled"), ckpt)
    assert cfg.run.init_soften == 0 and get("gdp").init_soften == 0.2 and get("hsdag").init_soften == 1
    run = resolve_run(cfg, lambda s: None)
    env = load(get("gdp").env)(run.env_config)
    loaded = build_module(ckpt, get("gdp"), env).net.policy[-1].weight
    ray.init(address="local", include_dashboard=False, num_cpus=1, log_to_driver=False)
    try:
        for run_cfg, factor in ((cfg, 0.2), (cfg.replace(init_soften=1.0), 1.0)):
            driver = RLDriver(resolve_run(run_cfg, lambda s: None), env)
            runner = driver.algo.get_module().net.policy[-1].weight
            assert torch.allclose(runner, factor * loaded), factor
            driver.stop()
    finally:
        ray.shutdown()


def test_init_soften_factor_is_the_methods_own_unless_set_and_refused_where_it_cannot_apply():
    from hsdag_ray.cli import UsageError
    from hsdag_ray.run.pretrained import init_soften_factor
    from policies.registry import get

    base = TrainConfig.of(init="ckpt")
    assert init_soften_factor(base, get("gdp")) == 0.2
    assert init_soften_factor(base, get("hsdag")) == 1.0
    assert init_soften_factor(base.replace(init_soften=0.5), get("hsdag")) == 0.5
    assert init_soften_factor(base, get("placeto")) == 1.0  # its own: off, so nothing to refuse
    with pytest.raises(UsageError, match="placeto policy does not have"):
        init_soften_factor(base.replace(init_soften=0.5), get("placeto"))
