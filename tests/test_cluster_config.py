"""cluster/config.yaml is a valid Ray cluster-launcher file for an on-premise cluster."""
from pathlib import Path

import yaml
from ray.autoscaler._private.util import prepare_config, validate_config

CONFIG = Path(__file__).resolve().parents[1] / "cluster" / "config.yaml"


def test_cluster_config_validates_with_rays_own_validator():
    cfg = yaml.safe_load(CONFIG.read_text())
    assert cfg["provider"]["type"] == "local"
    assert cfg["provider"]["head_ip"] and len(cfg["provider"]["worker_ips"]) >= 1
    validate_config(prepare_config(cfg))
    # measuring machines advertise the slot the measuring EnvRunners ask for
    from hsdag_ray.train import MEASURE_RESOURCE

    assert any(MEASURE_RESOURCE in cmd for cmd in cfg["worker_start_ray_commands"])
