"""A placed PyTorch program on disk: save it, load it in another process, run it.

``python -m hsdag_ray.apply --backend torch ... --save DIR`` (or :func:`save_placed`)
writes::

    DIR/placed.json   the manifest: backend "torch", the device specs, the placement
                      (fx node name -> device name), the inputs' names, shapes and
                      dtypes, the stages' devices in run order, the model's name
    DIR/program.pt2   the functional ExportedProgram (``torch.export.save``): graph and
                      weights at float32, whatever the devices compute in
    DIR/inputs.pt     the example inputs it was exported and checked with (a list of
                      tensors, ``torch.save``)

:func:`load_placed` reads them back (``torch.export.load``, then
:func:`hsdag_core.torch_graph.program_from_exported` and
:func:`envs.pytorch.stages.build_placed`): the fx node names of a loaded program are
those it was saved with, so the saved placement applies to it as it is. The devices are
recreated from their specs, so the loading machine must have them (a ``cuda:0`` save
needs a GPU there). A program whose inputs or outputs are a library's own structure (a
Hugging Face model returns a ``ModelOutput``) is read back only once that type is
registered with ``torch.utils._pytree``, which importing its module does: the manifest
lists those modules (``pytree_modules``) and :func:`load_torch` imports them first.
Nothing here imports OpenVINO or Ray::

    from hsdag_ray.placed import load_placed      # any save, as envs.open_saved.load_placed

    placed = load_placed("DIR")
    outputs = placed(*placed.example_inputs)       # a list of tensors on the host
    print(placed.devices, placed.stages, outputs[0].shape)
"""
from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Mapping, Optional, Sequence, Union

import torch

from envs.pytorch.devices import check_devices, parse_device
from envs.pytorch.stages import TensorCache, build_placed, stage_of_nodes, to_host

__all__ = ["FORMAT", "MANIFEST", "BACKEND", "TorchPlaced", "save_placed", "load_placed", "load_torch"]

#: the manifest format, shared with the OpenVINO save (:mod:`hsdag_ray.placed`), which
#: reads ``backend`` to tell the two apart
FORMAT = "hsdag_ray.placed/1"
MANIFEST = "placed.json"
BACKEND = "torch"
PROGRAM_FILE = "program.pt2"
INPUTS_FILE = "inputs.pt"

#: fx node kinds that carry no computation to place
_UNPLACED = ("placeholder", "get_attr", "output")


def _compute_nodes(gm) -> list[str]:
    import operator

    return [n.name for n in gm.graph.nodes
            if n.op not in _UNPLACED and n.target is not operator.getitem]


def _pytree_modules(exported) -> list[str]:
    """The modules defining the container types of ``exported``'s inputs and outputs, other
    than Python's own (a ``ModelOutput`` of transformers, say)."""
    found: set[str] = set()

    def walk(spec) -> None:
        if spec is None:
            return
        module = getattr(spec.type, "__module__", None)
        if module and module != "builtins":
            found.add(module)
        children = spec.children() if callable(getattr(spec, "children", None)) else spec.children_specs
        for child in children:
            walk(child)

    call = getattr(exported, "call_spec", None)
    if call is not None:
        walk(call.in_spec)
        walk(call.out_spec)
    return sorted(found)


def save_placed(directory: Union[str, Path], program, affinity: Mapping[str, str],
                device_specs: Sequence[str]) -> dict:
    """Write ``program`` (a :class:`~hsdag_core.torch_graph.TorchProgram` exported by this
    project) placed by ``affinity`` to ``directory`` (layout in the module docstring).

    Args:
        directory: created if missing; files of an earlier save are overwritten.
        program: the program; its ``exported`` ExportedProgram is what is written.
        affinity: fx node name -> device name, covering every op (``getitem`` nodes and
            ops of parameters alone may be left out: they go with the op they read or
            their first consumer, as when measuring).
        device_specs: the torch device specs the names come from (``cpu``, ``cpu:bf16``,
            ``cuda:0:mem=2GB``), recreated when loading.

    Returns:
        The manifest written to ``placed.json``.

    Raises:
        ValueError: one sentence when the program has no ExportedProgram, the affinity
            misses an op, or names a device not among ``device_specs``.
    """
    if program.exported is None:
        raise ValueError(f"{program.name} was not made by torch.export here (no ExportedProgram "
                         "to save); build it with hsdag_core.torch_graph.load_program")
    names = [parse_device(s).name for s in device_specs]
    missing = [n for n in _compute_nodes(program.gm) if n not in affinity]
    if missing:
        raise ValueError(f"the placement misses {len(missing)} op(s) of {program.name}, "
                         f"e.g. {missing[0]!r}")
    unknown = sorted(set(affinity.values()) - set(names))
    if unknown:
        raise ValueError(f"the placement puts ops on {unknown[0]}, which is not one of the "
                         f"devices {', '.join(names)}")
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    torch.export.save(program.exported, out / PROGRAM_FILE)
    torch.save([x.detach().cpu() for x in program.example_inputs], out / INPUTS_FILE)
    _, stages = stage_of_nodes(program.gm, affinity)
    used = [d for d in names if d in set(affinity.values())]
    manifest = {
        "format": FORMAT, "backend": BACKEND, "model": program.name, "devices": list(device_specs),
        "devices_used": used, "stages": stages, "program_file": PROGRAM_FILE,
        "inputs_file": INPUTS_FILE, "pytree_modules": _pytree_modules(program.exported),
        "inputs": [{"name": nm, "shape": list(x.shape), "dtype": str(x.dtype).replace("torch.", "")}
                   for nm, x in zip(program.input_names, program.example_inputs)],
        "affinity": dict(affinity),
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1))
    return manifest


class TorchPlaced:
    """A saved placement built on its devices; call it with the inputs to run it.

    Attributes:
        devices: the device names the placement uses, in ``--devices`` order.
        stages: each stage's device name, in run order (a device change in graph order
            starts a stage, as the simulator counts boundaries).
        input_names: the program's inputs, in call order.
        example_inputs: the inputs saved with it (on the host).
        manifest: the contents of ``placed.json``.
        path: ``"torch"`` (how it runs, as :class:`hsdag_ray.placed.PlacedModel` says
            ``single``, ``hetero`` or ``pipeline``).
        program: the loaded :class:`~hsdag_core.torch_graph.TorchProgram`.
    """

    path = "torch"

    def __init__(self, program, module, stages: list[str], manifest: dict, example_inputs) -> None:
        self.program, self.module, self.manifest = program, module, manifest
        self.stages = list(stages)
        self.devices: list[str] = list(manifest["devices_used"])
        self.input_names: list[str] = [i["name"] for i in manifest["inputs"]]
        self.example_inputs = tuple(example_inputs)

    def __call__(self, *inputs: torch.Tensor) -> list[torch.Tensor]:
        """Run one inference on ``inputs`` (tensors in :attr:`input_names` order, on the
        host); return the outputs as tensors on the host, float32 where floating.

        Raises:
            ValueError: for a wrong number of inputs or a misshapen one.
        """
        if len(inputs) != len(self.input_names):
            raise ValueError(f"the program takes {len(self.input_names)} input(s) "
                             f"{self.input_names}; got {len(inputs)}")
        for x, spec in zip(inputs, self.manifest["inputs"]):
            if not isinstance(x, torch.Tensor) or list(x.shape) != spec["shape"]:
                got = list(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
                raise ValueError(f"input {spec['name']!r} must be a tensor of shape {spec['shape']}, "
                                 f"not {got}")
        with torch.inference_mode():
            return to_host(self.module(*inputs))

    infer = __call__


def read_manifest(directory: Union[str, Path]) -> dict:
    """The manifest of a placed model in ``directory``. Raises ValueError with one sentence
    when there is none or it is not one."""
    file = Path(directory) / MANIFEST
    if not file.is_file():
        raise ValueError(f"{Path(directory)} holds no {MANIFEST}; save a placed model there with "
                         "python -m hsdag_ray.apply ... --save DIR")
    try:
        manifest = json.loads(file.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{file} is not valid JSON ({exc.msg})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ValueError(f"{file} is not a {FORMAT} manifest")
    return manifest


def load_placed(directory: Union[str, Path], threads: Optional[int] = None) -> TorchPlaced:
    """Load a placed program written by :func:`save_placed` and build it on its devices.

    Args:
        directory: the folder holding ``placed.json``.
        threads: ``torch.set_num_threads`` for this process (None: leave it).

    Raises:
        ValueError: one sentence when the folder is not a torch placed model, a device is
            missing here, or the program cannot be read.
    """
    folder = Path(directory)
    manifest = read_manifest(folder)
    if manifest.get("backend") != BACKEND:
        raise ValueError(f"{folder / MANIFEST} is a placed model of the "
                         f"{manifest.get('backend', 'OpenVINO')} backend; load it with "
                         "hsdag_ray.placed.load_placed")
    return load_torch(folder, manifest, threads)


def load_torch(folder: Path, manifest: dict, threads: Optional[int] = None) -> TorchPlaced:
    """Build the torch placed program of ``folder`` (its ``manifest`` read) on its devices,
    as :func:`envs.open_saved.load_placed` hands it a torch save; ``threads``:
    ``torch.set_num_threads`` for this process (None: leave it)."""
    from hsdag_core.torch_graph import program_from_exported

    devices = check_devices(manifest["devices"])
    by_name = {d.name: d for d in devices}
    if threads:
        torch.set_num_threads(threads)
    for module in manifest.get("pytree_modules", []):  # registers its output types
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise ValueError(f"the placed program in {folder} returns types of {module}, which "
                             f"cannot be imported here ({exc}); install it") from None
    try:
        ep = torch.export.load(folder / manifest["program_file"])
        inputs = torch.load(folder / manifest["inputs_file"], weights_only=True)
    except (OSError, RuntimeError, KeyError) as exc:
        raise ValueError(f"cannot read the placed program in {folder}: "
                         f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    program = program_from_exported(manifest.get("model", "program"), ep, None, inputs)
    affinity = manifest["affinity"]
    missing = [n for n in _compute_nodes(program.gm) if n not in affinity]
    if missing:
        raise ValueError(f"the placement in {folder / MANIFEST} misses the op {missing[0]!r} of "
                         "the saved program; save it again")
    module, stages = build_placed(program.gm, affinity, by_name, TensorCache())
    return TorchPlaced(program, module, stages, manifest, inputs)
