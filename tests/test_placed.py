"""One load_placed for every backend's save: the manifest says which loader builds it."""
import json

import pytest

from envs.placed import LOADERS, load_placed


def test_the_manifest_picks_the_loader_and_an_unknown_backend_is_one_sentence(tmp_path):
    import importlib

    import hsdag_ray.placed

    assert hsdag_ray.placed.load_placed is load_placed  # the documented import is this one
    for target in LOADERS.values():  # every loader named exists
        module, _, function = target.partition(":")
        assert callable(getattr(importlib.import_module(module), function))
    (tmp_path / "placed.json").write_text(json.dumps({"format": "hsdag_ray.placed/1",
                                                      "backend": "tpu"}))
    with pytest.raises(ValueError, match="'tpu' backend"):
        load_placed(tmp_path)
    (tmp_path / "placed.json").write_text(json.dumps({"format": "other/2"}))
    with pytest.raises(ValueError, match="not a hsdag_ray.placed/1 manifest"):
        load_placed(tmp_path)
