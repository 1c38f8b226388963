"""--budget-unit measurements: a budget of new placements measured, proposals capped."""
from __future__ import annotations

import json

import pytest

from hsdag_ray.cli import UsageError
from hsdag_ray.run.config import TrainConfig
from hsdag_ray.run.training import PROPOSAL_CAP, train

pytestmark = pytest.mark.ray  # runs train, sweep, pretrain or Ray itself in this process


def _run(tmp_path, name: str, **kw) -> dict:
    cfg = TrainConfig.of(backend="simulator", devices=["CPU", "GPU_SMALLMEM"], env_runners=0,
                      wandb="disabled", out=str(tmp_path), name=name, checkpoint_every=100, **kw)
    return train(cfg, quiet=True)


def test_a_budget_of_measurements_counts_new_placements_only(tmp_path):
    s = _run(tmp_path, "m", model="resnet50", budget=30, budget_unit="measurements")
    assert s["measurements"] >= 30  # cache hits did not count toward the budget
    rows = [json.loads(r) for r in (tmp_path / "m" / "metrics.jsonl").read_text().splitlines()]
    # it stopped after the iteration that reached it, not one later
    assert rows[-2]["measurements"] < 30 <= rows[-1]["measurements"] == s["measurements"]


def test_a_policy_that_proposes_nothing_new_stops_at_the_proposal_cap(tmp_path):
    # three nodes the coarsening joins into one: two placements exist, 6 can never be measured
    s = _run(tmp_path, "cap", model="gen:layered:n=3:c=16:w=1:seed=0", budget=6,
             budget_unit="measurements", episode_len=10)
    # the cap counts the policy's proposals (as published, nothing is measured before them)
    assert s["measurements"] <= 4 and s["placements"] == 6 * PROPOSAL_CAP


def test_budget_unit_is_checked():
    with pytest.raises(UsageError, match="unknown budget_unit 'seconds'; choose one of "
                                         "placements, measurements"):
        TrainConfig.of(budget_unit="seconds").validate()
