"""DOPPLER's imitation start (``--imitate-steps``), an aid open to every learned method."""
import json

import pytest

from hsdag_ray.cli import UsageError
from hsdag_ray.run.config import TrainConfig
from hsdag_ray.run.training import train

pytestmark = pytest.mark.ray  # runs train in this process


def _run(tmp_path, profile, name, **kw):
    cfg = TrainConfig.of(model="tiny_cnn", backend="simulator", profile=str(profile),
                         env_runners=0, wandb="disabled", out=str(tmp_path), name=name,
                         episode_len=5, budget=10, budget_unit="measurements", **kw)
    s = train(cfg, quiet=True)
    log = json.loads((tmp_path / name / "store.json").read_text())["log"]
    return s, log


@pytest.mark.parametrize("method", ["hsdag", "gdp"])
def test_an_imitated_policy_proposes_the_profiles_optimum_in_its_first_episode(
        tmp_path, four_device_profile, method):
    s, log = _run(tmp_path, four_device_profile, method, method=method, imitate_steps=150)
    assert s["guided_by"] == ["imitation start"]
    optimum = s["baselines"]["optimum"]
    first_episode = [e["latency_s"] for e in log[:5] if e.get("latency_s")]
    assert min(first_episode) == pytest.approx(optimum)


def test_the_imitation_start_is_refused_where_it_cannot_run(tmp_path, four_device_profile):
    with pytest.raises(UsageError, match="random learns no policy"):
        _run(tmp_path, four_device_profile, "r", method="random", imitate_steps=10)
    with pytest.raises(UsageError, match="imitate_steps must be 0"):
        TrainConfig.of(imitate_steps=-1).validate()
