"""One load_placed for every backend's save: the manifest names the graph source that loads it."""
import json

import pytest

from envs.backends import BACKENDS
from envs.open_saved import load_placed


def test_the_manifest_picks_the_loader_and_an_unknown_backend_is_one_sentence(tmp_path):
    import hsdag_ray.placed
    from envs.source import GraphSource

    assert hsdag_ray.placed.load_placed is load_placed  # the documented import is this one
    for kind in BACKENDS.values():  # every backend's source loads its own saves
        assert type(kind.graph).load_placed is not GraphSource.load_placed or not kind.deploys
    (tmp_path / "placed.json").write_text(json.dumps({"format": "hsdag_ray.placed/1",
                                                      "backend": "tpu"}))
    with pytest.raises(ValueError, match="'tpu' backend"):
        load_placed(tmp_path)
    (tmp_path / "placed.json").write_text(json.dumps({"format": "other/2"}))
    with pytest.raises(ValueError, match="not a hsdag_ray.placed/1 manifest"):
        load_placed(tmp_path)
