"""Real OpenVINO measurement, one module per responsibility.

``devices`` (device specs, virtual devices), ``stages`` (a placement cut into
stage models), ``runners`` (infer requests, the stage pipeline, timing, error
translation), ``backend`` (:class:`~envs.openvino.backend.OpenVINOBackend`),
``auto`` (the OpenVINO AUTO baseline), ``op_times`` (profiling
attribution), ``saved`` (a placed model saved and loaded), ``apply`` (a placement applied
next to AUTO and HETERO's own splits) and ``source`` (the graph source the backends
register: :data:`envs.openvino.source.SOURCE`).
"""
