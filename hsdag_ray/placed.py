"""A placed model on disk: save it, load it, run it.

``python -m hsdag_ray.apply ... --save DIR`` writes a folder that any Python process
loads and runs on its devices::

    from hsdag_ray.placed import load_placed

    placed = load_placed("DIR")                   # builds every stage on its device
    outputs = placed({"input": x})                # or placed([x]) / placed(x): in model order
    print(placed.path, placed.devices, placed.output_names, outputs[0].shape)

:func:`load_placed` (:mod:`envs.open_saved`) reads the manifest and hands the folder to its
backend: an OpenVINO save (:mod:`envs.openvino.saved`, layout there) is compiled on its
OpenVINO devices, a torch save (``apply --backend torch --save DIR``,
:mod:`envs.pytorch.saved`) is built on its PyTorch devices, without OpenVINO.
"""
from envs.openvino.saved import FORMAT, MANIFEST, PlacedModel, save_placed
from envs.open_saved import load_placed

__all__ = ["FORMAT", "MANIFEST", "PlacedModel", "save_placed", "load_placed"]
