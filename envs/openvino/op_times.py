"""Per-op times from OpenVINO's profiling of a runtime (fused) graph, attributed to the original ops."""
from __future__ import annotations

from typing import Mapping, Optional, Sequence

import openvino as ov

__all__ = ['attribute_node_times']

def attribute_node_times(runtime: ov.Model, node_time: Mapping[str, float],
                          op_names: Sequence[str]) -> dict[str, float]:
    """Map runtime-node times onto original op names (rules in OpenVINOBackend.profile_ops)."""
    times = {name: 0.0 for name in op_names}
    main_op: dict[str, Optional[str]] = {}
    for node in runtime.get_ordered_ops():
        node_name = node.get_friendly_name()
        rt_info = node.get_rt_info()
        originals = ([n.strip() for n in rt_info["originalLayersNames"].astype(str).split(",") if n.strip()]
                     if "originalLayersNames" in rt_info else [])
        originals = [n for n in originals if n in times]
        main_op[node_name] = node_name if node_name in originals else (originals[0] if originals else None)
    for node in runtime.get_ordered_ops():
        node_name = node.get_friendly_name()
        target = main_op[node_name]
        if target is None:  # plugin-inserted: charge the consumer, else the producer
            neighbours = [i.get_node().get_friendly_name()
                          for o in node.outputs() for i in o.get_target_inputs()]
            neighbours += [v.get_node().get_friendly_name() for v in node.input_values()]
            target = next((main_op[n] for n in neighbours if main_op.get(n)), None)
        if target is not None:
            times[target] += node_time.get(node_name, 0.0)
    return times
