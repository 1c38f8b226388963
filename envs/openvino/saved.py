"""An OpenVINO placed model on disk: save it, and compile it again on its devices.

The layout (written by :func:`save_placed`, e.g. through ``python -m hsdag_ray.apply ...
--save DIR``)::

    DIR/placed.json     the manifest: devices, how the model runs, inputs, outputs, stages
    DIR/model.xml/.bin  the whole model as OpenVINO IR (weights kept at their precision);
                        the placement is in its model-level rt_info:
                        hsdag_placement/affinity (JSON: op friendly name -> device) and
                        hsdag_placement/devices (the device specs, comma-separated)
    DIR/stageK.xml/.bin one IR per stage, in run order, when the placement runs as a
                        stage pipeline (the manifest lists each stage's device and the
                        tensors it takes from the model inputs and earlier stages)

OpenVINO does not write an op's own ``affinity`` rt_info into IR, so the
placement travels in the model's rt_info and :func:`load_openvino` puts it back
on the ops before compiling on HETERO. :func:`envs.open_saved.load_placed` reads any
save's manifest and hands an OpenVINO one here.

The devices are recreated from their specs (``CPU_F32`` is a second CPU
plugin instance at f32, see :mod:`envs.openvino.devices`), so the machine
that loads must have the real devices behind them.
"""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Mapping, Optional, Sequence, Union

import numpy as np

# OpenVINO is imported by the functions that use it
if TYPE_CHECKING:  # annotations only
    import openvino as ov

    from envs.openvino.runners import Runner
    from envs.openvino.devices import DeviceSet

__all__ = ["FORMAT", "MANIFEST", "PlacedModel", "save_placed", "load_openvino"]

FORMAT = "hsdag_ray.placed/1"
MANIFEST = "placed.json"
_RT_KEY = "hsdag_placement"
Inputs = Union[np.ndarray, Sequence[np.ndarray], Mapping[str, np.ndarray]]


def _port_name(port: ov.Output) -> str:
    return port.get_any_name() if port.get_names() else port.get_node().get_friendly_name()


def save_placed(directory: Union[str, Path], model: ov.Model, affinity: Mapping[str, str],
                devices: Sequence[str], path: str, threads: int = 0) -> dict:
    """Write ``model`` placed by ``affinity`` to ``directory`` (layout in the module doc).

    Args:
        directory: created if missing; files of an earlier save are overwritten.
        model: a static-shape model whose op friendly names are unique (not changed).
        affinity: every op's friendly name -> device name (structural ops included).
        devices: the device specs the names come from (``CPU``, ``CPU_F32``,
            ``CPU2=CPU:precision=f32``...), recreated when loading.
        path: how it runs: ``single`` (one device), ``hetero`` (OpenVINO HETERO)
            or ``pipeline`` (stage models, written as well).
        threads: INFERENCE_NUM_THREADS for devices whose spec sets none (0 = default).

    Returns:
        The manifest written to ``placed.json``.

    Raises:
        ValueError: for an unknown ``path``, an affinity that misses ops, or a
            model output the stage pipeline cannot produce.
    """
    import openvino as ov

    if path not in ("single", "hetero", "pipeline"):
        raise ValueError(f"unknown path {path!r}; use single, hetero or pipeline")
    missing = [op.get_friendly_name() for op in model.get_ordered_ops()
               if op.get_friendly_name() not in affinity]
    if missing:
        raise ValueError(f"the affinity misses {len(missing)} op(s) of the model, e.g. {missing[0]!r}")
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    used = [d for d in _names(devices) if d in set(affinity.values())]
    whole = model.clone()
    whole.set_rt_info(json.dumps(dict(affinity)), [_RT_KEY, "affinity"])
    whole.set_rt_info(",".join(devices), [_RT_KEY, "devices"])
    ov.save_model(whole, out / "model.xml", compress_to_fp16=False)
    manifest: dict = {
        "format": FORMAT, "model": model.get_friendly_name(), "devices": list(devices),
        "threads": threads, "devices_used": used, "path": path, "model_file": "model.xml",
        "inputs": [{"name": _port_name(p), "tensor": [p.get_node().get_friendly_name(), 0],
                    "shape": list(p.get_partial_shape().to_shape()),
                    "dtype": np.dtype(p.get_element_type().to_dtype()).name} for p in model.inputs],
        "outputs": [], "stages": [],
    }
    for port in model.outputs:
        src = port.get_node().input_value(0)  # the Result's input
        manifest["outputs"].append({"name": _port_name(port),
                                    "tensor": [src.get_node().get_friendly_name(), src.get_index()]})
    if path == "pipeline":
        manifest["stages"] = _save_stages(out, model, affinity)
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1))
    return manifest


def _names(specs: Sequence[str]) -> list[str]:
    from envs.openvino.devices import DeviceSpec

    return [DeviceSpec.parse(s).name for s in specs]


def _save_stages(out: Path, model: ov.Model, affinity: Mapping[str, str]) -> list[dict]:
    """One IR per stage; results renamed after the tensor they hand on."""
    import openvino as ov

    from envs.openvino.stages import split_stages

    stages, output_keys = split_stages(model, affinity)
    produced = {key for stage in stages for key in stage.outputs}
    produced |= {(p.get_friendly_name(), 0) for p in model.get_parameters()}
    constants = [key for key in output_keys if key not in produced]
    if constants:
        raise ValueError(f"model output {constants[0]} is a constant, which a stage pipeline "
                         "does not produce; save the placement with path 'hetero'")
    entries = []
    for s, stage in enumerate(stages):
        for result, (name, index) in zip(stage.model.get_results(), stage.outputs):
            result.set_friendly_name(f"handoff:{name}:{index}")
        file = f"stage{s}.xml"
        ov.save_model(stage.model, out / file, compress_to_fp16=False)
        entries.append({"file": file, "device": stage.device, "ops": len(stage.ops),
                        "inputs": [list(k) for k in stage.inputs],
                        "outputs": [list(k) for k in stage.outputs]})
    return entries


class PlacedModel:
    """A saved placement compiled on its devices; call it with inputs to run it.

    Attributes:
        path: ``single``, ``hetero`` or ``pipeline``.
        devices: the device names the placement uses.
        input_names / output_names: the model's input and output names, in order.
        manifest: the contents of ``placed.json``.
        device_set: the configured devices (their Core compiled everything).
    """

    def __init__(self, directory: Path, manifest: dict, device_set: DeviceSet) -> None:
        from envs.openvino.runners import PipelineRunner, RequestRunner

        self.manifest = manifest
        self.device_set = device_set
        self.path: str = manifest["path"]
        self.devices: list[str] = list(manifest["devices_used"])
        self.input_names = [i["name"] for i in manifest["inputs"]]
        self.output_names = [o["name"] for o in manifest["outputs"]]
        self._input_keys = [(i["tensor"][0], int(i["tensor"][1])) for i in manifest["inputs"]]
        self._output_keys = [(o["tensor"][0], int(o["tensor"][1])) for o in manifest["outputs"]]
        core = device_set.core
        self._runner: Runner
        if self.path == "pipeline":
            stages, compiled = [], []
            for entry in manifest["stages"]:
                compiled.append(core.compile_model(core.read_model(directory / entry["file"]),
                                                   entry["device"]))
                stages.append(SimpleNamespace(inputs=[(k[0], int(k[1])) for k in entry["inputs"]],
                                              outputs=[(k[0], int(k[1])) for k in entry["outputs"]]))
            self._runner = PipelineRunner(stages, compiled, {}, self._output_keys)
        else:
            model = core.read_model(directory / manifest["model_file"])
            if self.path == "hetero":
                affinity = json.loads(model.get_rt_info([_RT_KEY, "affinity"]).astype(str))
                for op in model.get_ordered_ops():
                    op.get_rt_info()["affinity"] = affinity[op.get_friendly_name()]
                target = "HETERO:" + ",".join(self.devices)
            else:
                target = self.devices[0]
            self._runner = RequestRunner(core.compile_model(model, target), [])

    def _arrays(self, inputs: Inputs) -> list[np.ndarray]:
        if isinstance(inputs, Mapping):
            unknown = sorted(set(inputs) - set(self.input_names))
            absent = [n for n in self.input_names if n not in inputs]
            if unknown or absent:
                raise ValueError(f"inputs must be named {self.input_names}; got {sorted(inputs)}")
            arrays = [inputs[n] for n in self.input_names]
        else:
            arrays = [inputs] if isinstance(inputs, np.ndarray) else list(inputs)
            if len(arrays) != len(self.input_names):
                raise ValueError(f"the model takes {len(self.input_names)} input(s) "
                                 f"{self.input_names}; got {len(arrays)}")
        out = []
        for array, spec in zip(arrays, self.manifest["inputs"]):
            array = np.ascontiguousarray(array, dtype=np.dtype(spec["dtype"]))
            if list(array.shape) != spec["shape"]:
                raise ValueError(f"input {spec['name']!r} must have shape {spec['shape']}, "
                                 f"not {list(array.shape)}")
            out.append(array)
        return out

    def __call__(self, inputs: Inputs) -> list[np.ndarray]:
        """Run one inference; return copies of the outputs in model order.

        Args:
            inputs: arrays in model input order (one array for a one-input
                model), or a mapping input name -> array.

        Raises:
            ValueError: for missing, extra or misshapen inputs.
            RuntimeError: when OpenVINO fails to run the model.
        """
        import openvino as ov

        from envs.openvino.runners import PipelineRunner, StageFailure

        tensors = [ov.Tensor(a) for a in self._arrays(inputs)]
        try:
            if isinstance(self._runner, PipelineRunner):
                self._runner.set_sources(dict(zip(self._input_keys, tensors)))
            else:
                self._runner.set_inputs(tensors)
            self._runner.infer()
        except StageFailure as exc:
            raise RuntimeError(exc.message) from exc
        return self._runner.outputs()

    infer = __call__


def load_openvino(folder: Path, manifest: dict, threads: Optional[int] = None) -> PlacedModel:
    """Compile an OpenVINO placed model (its ``manifest`` read from ``folder``) on its
    devices; ``threads``: INFERENCE_NUM_THREADS per device (None = the value saved).
    ValueError with one sentence when a device is missing here or a part cannot compile."""
    from envs.openvino.runners import StageFailure
    from envs.openvino.devices import DeviceSet
    from hsdag_core.models import openvino_error_text

    device_set = DeviceSet(manifest["devices"],
                           default_threads=manifest.get("threads", 0) if threads is None else threads)
    if device_set.errors:
        raise ValueError("cannot recreate the placed model's devices: " + "; ".join(device_set.errors))
    try:
        return PlacedModel(folder, manifest, device_set)
    except (RuntimeError, KeyError, OSError, StageFailure) as exc:
        raise ValueError(f"cannot compile the placed model in {folder}: "
                         f"{openvino_error_text(exc)}") from None
