"""The prepared GPU check: the torch backend on a real CPU + NVIDIA GPU pair, in one short run.

Run it as ``bash bench/gpu_check.sh OUT_DIR`` on a machine with PyTorch, transformers and
accelerate (no Ray, OpenVINO or W&B needed: the methods run in-process,
:mod:`hsdag_ray.run.inprocess`). It writes ``OUT_DIR/gpu_check.json`` and
``OUT_DIR/gpu_check.md`` after every section, so a run stopped early keeps what it measured,
and ends with a one-line verdict per section: met or not, and by how much.

Sections (one module each):

``offload`` (:mod:`bench.gpu_check.offload`)
    Models whose weights exceed the capped GPU, the GPU holding about 40%, 60% and 80% of
    them: all on the CPU, all on the uncapped GPU, Accelerate's sequential and balanced
    maps, the exact solver on the profile, refit, anneal and HSDAG at one equal budget.
``fidelity`` (:mod:`bench.gpu_check.fidelity`)
    The simulator's mean error and Spearman against the re-measurement ceiling.
``speed`` (:mod:`bench.gpu_check.speed`)
    Placements measured per second, and what limits it (building, warm-up, timed runs).

Every timing is a median with its 95% interval over interleaved rounds
(:mod:`envs.intervals`). The models are sized by ``--size``: ``full`` (the default on a
CUDA device) is the issue's sizes (GPT-2 medium with all 24 layers, a 1.5 GB Llama-style
decoder, ResNet-152); ``small`` (the default with a CPU device standing in for the GPU on
a machine without one) scales them down so the check runs in minutes on two CPU cores,
and the output says so; ``tiny`` (what CI runs) times every section and method once on a
two-layer GPT-2 and ``tiny_cnn``: the machinery, not the aims. The stand-in is ``cpu:threads=1`` (the CPU in float32 on one
thread while its stages run): its cost does not hang on whether the CPU computes
bfloat16 natively (where it does not, ``cpu:bf16`` runs tens of times slower than float32,
and the check would take that much longer).
"""
