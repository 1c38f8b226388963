"""A run folder's checkpoints without a run: damage, fallback, old layouts, torn metrics, and
a pretrained checkpoint written whole or not at all (docs/reliability.md lists them)."""
import json
from pathlib import Path

import pytest

from hsdag_ray.cli import UsageError
from hsdag_ray.run.config import TrainConfig
from hsdag_ray.run.rundir import Run
from run_folder import rows

pytestmark = pytest.mark.ray  # runs train, sweep, pretrain or Ray itself in this process


def _policy(text: str):
    def save(folder: Path) -> None:
        folder.mkdir(parents=True)
        (folder / "weights.bin").write_text(text)
        (folder / "sub").mkdir()
        (folder / "sub" / "more.pkl").write_text(text * 3)
    return save


def _state(it: int) -> dict:
    return {**Run.fresh_state(), "iteration": it}


def _run(tmp_path) -> Run:
    return Run(TrainConfig.of(out=str(tmp_path), name="r"), None)


def test_only_the_latest_two_checkpoints_are_kept_and_pointed_to(tmp_path):
    run = _run(tmp_path)
    for it in range(4):
        run.commit_checkpoint(it, _policy(f"w{it}"), _state(it), {"log": [{"key": f"k{it}"}]})
    assert sorted(p.name for p in run.checkpoints.iterdir()) == ["000002", "000003"]
    assert (run.checkpoint / "weights.bin").read_text() == "w3"
    assert json.loads(run.store_file.read_text())["log"] == [{"key": "k3"}]
    got = run.restore_point(say=lambda s: None)
    assert got.iteration == 3 and got.store["log"] == [{"key": "k3"}]
    assert (got.policy / "weights.bin").read_text() == "w3"


@pytest.mark.parametrize("damage", ["empty", "deleted", "manifest", "truncated_state"])
def test_a_damaged_latest_checkpoint_falls_back_to_the_one_before(tmp_path, damage):
    run = _run(tmp_path)
    for it in (1, 2):
        run.commit_checkpoint(it, _policy(f"w{it}"), _state(it), {"log": []})
    latest = run.checkpoints / "000002"
    if damage == "empty":
        (latest / "policy" / "sub" / "more.pkl").write_text("")
    elif damage == "deleted":
        (latest / "policy" / "weights.bin").unlink()
    elif damage == "manifest":
        (latest / "MANIFEST.json").unlink()  # a checkpoint never completed
    else:
        (latest / "state.json").write_text("{\"iter")
    said = []
    got = run.restore_point(say=said.append)
    assert got.iteration == 1 and (got.policy / "weights.bin").read_text() == "w1"
    assert len(said) == 1 and "000002" in said[0] and "falling back" in said[0]
    # the damaged one is set aside: iteration 2 checkpointed again replaces nothing good
    run.commit_checkpoint(2, _policy("w2b"), _state(2), {"log": []})
    assert run.restore_point(say=said.append).iteration == 2
    assert (run.checkpoint / "weights.bin").read_text() == "w2b"


def test_no_intact_checkpoint_or_none_at_all_is_refused_in_one_sentence(tmp_path):
    run = _run(tmp_path)
    run.commit_checkpoint(1, _policy("w1"), _state(1), {"log": []})
    (run.checkpoints / "000001" / "store.json").write_text("")
    with pytest.raises(UsageError, match="cannot be resumed"):
        run.restore_point(say=lambda s: None)
    # checkpoints/ deleted (state.json and the metrics remain): refused, not started afresh
    run2 = Run(TrainConfig.of(out=str(tmp_path), name="r2"), None)
    run2.commit_checkpoint(1, _policy("w1"), _state(1), {"log": []})
    run2.append_metrics({"iteration": 1})
    import shutil

    shutil.rmtree(run2.checkpoints)
    with pytest.raises(UsageError, match="no checkpoint"):
        run2.restore_point(say=lambda s: None)
    # a run killed before its first checkpoint has nothing to lose: it starts again
    run3 = Run(TrainConfig.of(out=str(tmp_path), name="r3"), None)
    said = []
    assert run3.restore_point(say=said.append) is None and "beginning" in said[0]


def test_an_old_run_folder_still_resumes_or_is_refused(tmp_path):
    run = _run(tmp_path)
    _policy("old")(run.checkpoint)
    run.save_state(_state(3))
    run.store_file.write_text(json.dumps({"log": [{"key": "a"}]}))
    for it in (1, 2, 3, 3, 4):  # the old order: a row written before its checkpoint
        run.append_metrics({"iteration": it})
    got = run.restore_point(say=lambda s: None)
    assert got.iteration == 3 and got.policy == run.checkpoint
    run.truncate_metrics(got.iteration)
    assert [r["iteration"] for r in rows(run.dir)] == [1, 2, 3]
    # its next checkpoint is one of the new layout
    run.commit_checkpoint(4, _policy("new"), _state(4), {"log": []})
    assert run.checkpoint.is_symlink() and run.restore_point(say=lambda s: None).iteration == 4
    # an old folder whose store.json was emptied
    old = Run(TrainConfig.of(out=str(tmp_path), name="old2"), None)
    _policy("old")(old.checkpoint)
    old.save_state(_state(3))
    old.store_file.write_text("")
    with pytest.raises(UsageError, match="old layout"):
        old.restore_point(say=lambda s: None)


def test_metrics_cut_back_to_the_checkpoint_drop_a_torn_last_line(tmp_path):
    run = _run(tmp_path)
    for it in (1, 2, 3):
        run.append_metrics({"iteration": it})
    with run.metrics.open("a") as f:
        f.write('{"iteration": 4, "plac')  # killed mid-write
    run.truncate_metrics(2)
    assert [r["iteration"] for r in rows(run.dir)] == [1, 2]


def test_a_pretrained_checkpoint_is_written_whole_or_not_at_all(tmp_path):
    """save_pretrained writes aside and renames: a folder holds the previous checkpoint
    or the new one, never a half-written pretrained.pt (no temporary file left)."""
    import torch

    from hsdag_ray.run.pretrained import read_pretrained, save_pretrained

    module = torch.nn.Linear(3, 2)
    save_pretrained(tmp_path, module, {"method": "hsdag"})
    save_pretrained(tmp_path, torch.nn.Linear(3, 2), {"method": "hsdag", "iterations": 2})
    ckpt = read_pretrained(tmp_path)
    assert ckpt["iterations"] == 2 and set(ckpt["state_dict"]) == {"weight", "bias"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pretrained.json", "pretrained.pt"]
