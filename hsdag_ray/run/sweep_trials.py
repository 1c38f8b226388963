"""How a sweep's trials run on Ray Tune: what each trial holds (:func:`_resources`: its
bundles), whether any trial can ever start on the running Ray (:func:`_check_resources`),
and a sweep stopped by a signal (:class:`_Signals`, :class:`SweepInterrupted`)."""
from __future__ import annotations

from typing import Any, Optional

from hsdag_ray.cli import UsageError
from hsdag_ray.run.config import MEASURE_RESOURCE, TrainConfig

__all__ = ["SweepInterrupted"]


def _measures(cfg: TrainConfig) -> bool:
    """Whether a trial measures on real devices (a simulator with a measuring time stands
    for them), so its measuring actors hold measuring slots."""
    from envs.backends import is_real

    return is_real(cfg.env.backend) or cfg.env.sim_delay_s > 0


def _resources(sc, cfg: TrainConfig):
    """What one trial holds: a CPU for its driver and learner, then per EnvRunner a CPU
    (simulator) or a measuring slot (real devices: one per measuring machine, of a machine
    with the trial's devices when the cluster names device sets), with the GPUs each
    measuring actor asks for when a real backend measures on CUDA devices
    (:func:`envs.gpus.measuring_gpus`): an actor of the trial is placed only in the trial's
    bundles, and Ray refuses one asking for a GPU that no bundle holds. With no
    EnvRunner, the one measuring bundle is the measuring service's. A real backend's
    devices are the ones the trial will measure on: its default ones when the sweep names
    none (:func:`hsdag_ray.run.resolve.default_devices`), so on a cluster that names device
    sets the bundle holds the set its measuring actors ask for."""
    import ray
    from ray import tune

    from hsdag_ray.run.nodes import measuring_gpus, measuring_resources
    from hsdag_ray.run.resolve import default_devices

    from envs.backends import is_real

    runners = cfg.run.env_runners
    # the driver on the sweep's machine: its run folder is where the sweep reads and resumes it
    driver = {"CPU": 1} | ({f"node:{ray.util.get_node_ip_address()}": 0.001} if ray.is_initialized() else {})
    if _measures(cfg):
        devices = list(cfg.env.devices) or (default_devices(cfg.env.backend) if is_real(cfg.env.backend) else [])
        slot = measuring_resources(devices) if devices else {MEASURE_RESOURCE: 1}
        gpus = measuring_gpus({"backend": cfg.env.backend, "devices": devices})
        if gpus:
            slot = {**slot, "GPU": gpus}
        return tune.PlacementGroupFactory([driver] + [slot] * max(runners, 1), strategy="SPREAD")
    return tune.PlacementGroupFactory([driver] + [{"CPU": 1}] * runners, strategy="PACK")


def _check_resources(pgf, cfg: TrainConfig) -> None:
    """A :class:`UsageError` saying which resource is missing, and how to provide it, when
    no machine of the running Ray could ever hold a trial's bundles (Ray Tune would wait
    for them forever, starting no trial)."""
    import ray

    from hsdag_ray.run.nodes import unsatisfiable

    nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
    key, why = unsatisfiable(pgf.bundles, nodes)
    if not key:
        return
    if key == MEASURE_RESOURCE:
        fix = (f"a trial on real devices (--backend {cfg.env.backend}) measures on machines that "
               f"advertise it, one measurement at a time: start Ray on them with "
               f"--resources='{{\"{MEASURE_RESOURCE}\": 1}}' as in cluster/config.yaml"
               + (", or set train: {env_runners: N} to at most the measuring machines"
                  if cfg.run.env_runners > 1 else ""))
    elif key == "GPU":
        fix = (f"a measuring actor holds the GPUs of its devices ({', '.join(cfg.env.devices)}): start "
               "Ray on the measuring machines with --num-gpus, or measure on other --devices")
    elif key == "CPU":
        fix = "start Ray with more CPUs (ray start --num-cpus), or ask for fewer env_runners"
    else:
        fix = "start a machine that advertises it (ray start --resources), or change the settings"
    raise UsageError(f"no trial can ever start: each asks Ray for {why}; {fix}")



class SweepInterrupted(Exception):
    """The sweep was stopped by SIGINT or SIGTERM: its finished trials are kept, the
    others continue when it is run again; ``code`` is the exit status (128 + signal)."""

    def __init__(self, signum: int, missing: list[str]) -> None:
        super().__init__(f"interrupted; {len(missing)} trial(s) not finished")
        self.code = 128 + signum
        self.missing = missing


class _Signals:
    """While a sweep runs: SIGTERM does what SIGINT does (Ray Tune's SIGINT handler stops
    the running trials, keeps what finished and saves its state; outside Tune a
    KeyboardInterrupt), and the signal received is remembered for the exit status."""

    def __init__(self) -> None:
        self.signum: Optional[int] = None
        self._old: dict[int, Any] = {}

    def __enter__(self) -> "_Signals":
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame) -> None:
        import signal

        self.signum = self.signum or signum
        current = signal.getsignal(signal.SIGINT)
        if signum == signal.SIGTERM and callable(current) and current != self._handle:
            current(signal.SIGINT, frame)  # Ray Tune's: ends the run gracefully
            return
        raise KeyboardInterrupt

    def __exit__(self, *exc) -> None:
        import signal

        for sig, old in self._old.items():
            signal.signal(sig, old)
