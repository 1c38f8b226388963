"""Real OpenVINO measurement, one module per responsibility.

``devices`` (device specs, virtual devices), ``stages`` (a placement cut into
stage models), ``runners`` (infer requests, the stage pipeline, timing, error
translation), ``backend`` (:class:`~envs.openvino.backend.OpenVINOBackend`),
``auto`` (the OpenVINO AUTO baseline) and ``op_times`` (profiling
attribution). :mod:`envs.openvino_backend` re-exports the public names.
"""
