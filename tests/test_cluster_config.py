"""Every YAML file in cluster/ is a valid Ray cluster-launcher file for an on-premise
lab: Ray's own validation (no SSH), measuring workers with a slot and a device set,
the dashboard on loopback, secrets read from files outside the repository."""
import re
from pathlib import Path

import pytest
import yaml
from ray.autoscaler._private.util import prepare_config, validate_config

from hsdag_ray.run.config import MEASURE_RESOURCE
from hsdag_ray.run.nodes import DEVICES_PREFIX

pytestmark = pytest.mark.ray  # runs train, sweep, pretrain or Ray itself in this process

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = ROOT / "cluster"
FILES = sorted(p for p in CLUSTER.iterdir() if p.suffix in (".yaml", ".yml"))
SECRET_VARS = ("WANDB_API_KEY", "RAY_AUTH_TOKEN")


def check(path: Path) -> None:
    """Raise if ``path`` is not a launcher file this project can run on."""
    cfg = yaml.safe_load(path.read_text())
    if not isinstance(cfg, dict):
        raise ValueError(f"{path.name}: not a mapping")
    assert cfg["provider"]["type"] == "local", "an on-premise cluster uses provider local"
    assert cfg["provider"]["head_ip"] and len(cfg["provider"]["worker_ips"]) >= 1
    validate_config(prepare_config(cfg))
    workers = " ".join(cfg["worker_start_ray_commands"])
    head = " ".join(cfg["head_start_ray_commands"])
    # measuring machines advertise the slot the measuring actors ask for, and their devices
    assert MEASURE_RESOURCE in workers and DEVICES_PREFIX in workers
    assert MEASURE_RESOURCE not in head
    assert "--dashboard-host=127.0.0.1" in head, "the dashboard stays on loopback"
    assert "--disable-usage-stats" in head, "Ray's usage statistics stay off"
    text = path.read_text()
    for var in SECRET_VARS:
        for value in re.findall(rf"{var}=(\S+)", text):
            assert value.startswith('"$(') or value.startswith("$("), \
                f"{var} is written in {path.name}; read it from a file instead"
    for remote, local in (cfg.get("file_mounts") or {}).items():
        if not remote.startswith("~/.hsdag_secrets"):
            # the project's code, not the whole checkout (whose run folders hold links
            # that stop Ray's autoscaler): each path is a part of the project
            src = (ROOT / local).resolve()
            assert src != ROOT and src.exists() and ROOT in src.parents, (remote, local)
        if "secret" in remote:
            src = Path(local).expanduser().resolve()
            assert ROOT not in src.parents and src != ROOT, "secrets come from outside the repository"


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_every_cluster_file_validates(path):
    check(path)


def test_the_lab_config_is_there():
    assert CLUSTER / "config.yaml" in FILES


BROKEN = {
    "not yaml": "cluster_name: x\nprovider: [type: local\n",
    "no provider": "cluster_name: x\n",
    "unknown key": None,
    "no measuring slot": None,
    "public dashboard": None,
    "key in the file": None,
}


@pytest.mark.parametrize("what", list(BROKEN))
def test_a_broken_cluster_file_fails(what, tmp_path):
    good = (CLUSTER / "config.yaml").read_text()
    text = BROKEN[what] or {
        "unknown key": good + "\nmax_wrokers: 3\n",
        "no measuring slot": good.replace('"measure_slot": 1, ', ""),
        "public dashboard": good.replace("--dashboard-host=127.0.0.1", "--dashboard-host=0.0.0.0"),
        "key in the file": good.replace('WANDB_API_KEY="$(cat ~/.hsdag_secrets/wandb_api_key 2>/dev/null)"',
                                        "WANDB_API_KEY=0123456789abcdef", 1),
    }[what]
    assert text != good
    f = tmp_path / "broken.yaml"
    f.write_text(text)
    with pytest.raises(Exception):
        check(f)
