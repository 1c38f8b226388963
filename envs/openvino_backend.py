"""Real OpenVINO measurement backends, at the level of OpenVINO ops: the public names in one place.

The code lives in :mod:`envs.openvino` (devices, stages, runners, backend,
auto, op_times); this module re-exports what other code imports. See
:mod:`envs.openvino.devices` for the device spec syntax and
:mod:`envs.openvino.backend` for how placements are measured and which
failures become measurements.
"""
from __future__ import annotations

from envs.openvino.auto import AUTO_BACKEND, HETERO_MODES, auto_candidates, measure_auto, measure_hetero_mode
from envs.openvino.backend import Mode, OpenVINOBackend
from envs.openvino.devices import (
    DEVICE_ALIASES, PRECISIONS, DeviceInfo, DeviceSet, DeviceSpec, check_devices, find_plugin_library,
)
from envs.openvino.runners import TOLERANCE, random_inputs
from envs.openvino.stages import (
    STRUCTURAL_OPS, Stage, StagePlan, TensorKey, complete_affinity, plan_stages, split_stages,
)

__all__ = [
    "AUTO_BACKEND",
    "DEVICE_ALIASES",
    "PRECISIONS",
    "STRUCTURAL_OPS",
    "TOLERANCE",
    "HETERO_MODES",
    "DeviceInfo",
    "DeviceSet",
    "DeviceSpec",
    "Mode",
    "OpenVINOBackend",
    "Stage",
    "StagePlan",
    "TensorKey",
    "auto_candidates",
    "check_devices",
    "complete_affinity",
    "find_plugin_library",
    "measure_auto",
    "measure_hetero_mode",
    "plan_stages",
    "random_inputs",
    "split_stages",
]
