"""The settings of a training run.

:class:`TrainConfig` is the one typed config of ``python -m hsdag_ray.train``: nested
sections (:data:`SECTIONS`), each a dataclass whose fields carry their own help, checked
by :meth:`TrainConfig.validate`. :meth:`TrainConfig.with_settings` reads settings nested
by section (a YAML file, a run's ``config.json``) or flat by name (each name belongs to one
section; the few that several sections share are written ``section.name``), and still
reads the flat names of earlier releases (:data:`RENAMED`). :mod:`hsdag_ray.arguments`
makes the command line from the same fields.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping

from envs.base import TimingConfig
from hsdag_core.features import FeatureConfig
from hsdag_ray.cli import UsageError, read_yaml_mapping
from hsdag_ray.settings import AidSettings, EnvSettings, LearningSettings, RunSettings
from policies.gdp.config import GDPConfig
from policies.hsdag.config import HSDAGConfig
from policies.placeto.config import PlacetoConfig
from policies.rnn.config import RNNPlacerConfig

__all__ = ["TrainConfig", "SECTIONS", "RENAMED", "MEASURE_RESOURCE", "backend_choices", "ALGOS",
           "settings_of", "setting_index", "expand"]


#: the custom Ray resource a measuring machine advertises once (one measurement at a time)
MEASURE_RESOURCE = "measure_slot"

def backend_choices() -> tuple[str, ...]:
    """``--backend``'s choices: ``default`` and every registered backend."""
    from envs.backends import BACKENDS

    return ("default",) + tuple(BACKENDS)

ALGOS = ("reinforce", "ppo")


@dataclass(frozen=True)
class TrainConfig:
    """One training run, by section. The command line and a YAML file (``--config``,
    nested by section or flat) fill it; each section's fields say what they do."""

    run: RunSettings = field(default_factory=RunSettings)
    env: EnvSettings = field(default_factory=EnvSettings)
    timing: TimingConfig = field(default_factory=lambda: TimingConfig(repeats=5))
    features: FeatureConfig = field(default_factory=FeatureConfig)
    learning: LearningSettings = field(default_factory=LearningSettings)
    aids: AidSettings = field(default_factory=AidSettings)
    hsdag: HSDAGConfig = field(default_factory=lambda: HSDAGConfig(incumbent_prior=-1.0))
    placeto: PlacetoConfig = field(default_factory=PlacetoConfig)
    rnn: RNNPlacerConfig = field(default_factory=RNNPlacerConfig)
    gdp: GDPConfig = field(default_factory=GDPConfig)

    @classmethod
    def of(cls, **settings: Any) -> "TrainConfig":
        """The defaults with ``settings`` (flat names or ``section.name``) changed."""
        return cls().with_settings(settings)

    def replace(self, **settings: Any) -> "TrainConfig":
        """This config with ``settings`` (flat names or ``section.name``) changed."""
        return self.with_settings(settings)

    def with_settings(self, values: Mapping[str, Any], source: str = "the settings") -> "TrainConfig":
        """This config with ``values`` changed: sections as mappings (``{"learning": {"lr":
        0.01}}``), ``section.name`` keys or flat names, old names (:data:`RENAMED`) among
        them. A name no section has, or a value its section refuses, is a
        :class:`UsageError` naming ``source``."""
        updates: dict[str, dict[str, Any]] = {}
        for key, value in values.items():
            if key in SECTIONS and isinstance(value, Mapping):
                own = settings_of(SECTIONS[key])
                wrong = [k for k in value if k not in own and k not in RENAMED]
                if wrong:
                    where = setting_index().get(wrong[0])
                    raise UsageError(
                        f"{wrong[0]!r} in section {key!r} of {source} is not a {key} setting"
                        + (f"; it is a {' or '.join(where)} setting" if where else "")
                        + f" ({key}'s settings are {', '.join(own)})")
                items = [(f"{key}.{k}" if k in own else k, v) for k, v in value.items()]
            elif key in OLD_SECTIONS and isinstance(value, Mapping):
                items = list(value.items())
            else:
                items = [(key, value)]
            for k, v in items:
                for section, name, val in expand(k, v, source):
                    updates.setdefault(section, {})[name] = val
        if not updates:
            return self
        changed = {}
        for section, kw in updates.items():
            if "devices" in kw and kw["devices"] is not None:
                devices = kw["devices"]
                kw["devices"] = tuple(d for d in (devices.split(",") if isinstance(devices, str)
                                                  else devices) if d)
            try:
                changed[section] = dataclasses.replace(getattr(self, section), **kw)
            except (TypeError, ValueError) as e:
                raise UsageError(f"bad {section} setting in {source}: {e}") from None
        return dataclasses.replace(self, **changed)

    def to_dict(self) -> dict[str, Any]:
        """The settings nested by section (what ``config.json`` and W&B keep)."""
        return {name: {k: getattr(getattr(self, name), k) for k in settings_of(cls)}
                for name, cls in SECTIONS.items()}

    def validate(self) -> None:
        from envs.backends import BACKENDS, objective_error
        from envs.env_config import MEMORY_PENALTIES, REWARDS
        from envs.simulator import OBJECTIVES
        from hsdag_core.coarsening import COARSENINGS
        from policies.registry import METHODS
        from policies.advantages import ADVANTAGES

        run, env, learn, aids, t = self.run, self.env, self.learning, self.aids, self.timing
        unmeasured = objective_error(env.backend, env.objective) if env.backend in BACKENDS else ""
        checks = [
            (run.method in METHODS,
             f"unknown method {run.method!r}; choose one of {', '.join(METHODS)}"),
            (learn.algo in ALGOS + ("",),
             f"unknown algo {learn.algo!r}; choose {' or '.join(ALGOS)}"),
            (env.backend in backend_choices(),
             f"unknown backend {env.backend!r}; choose one of {', '.join(backend_choices())}"),
            (env.objective in OBJECTIVES,
             f"unknown objective {env.objective!r}; choose one of {', '.join(OBJECTIVES)}"),
            (not unmeasured, unmeasured),
            (env.coarsen in COARSENINGS,
             f"unknown coarsening {env.coarsen!r}; choose one of {', '.join(COARSENINGS)}"),
            (learn.advantages in ADVANTAGES,
             f"unknown advantages {learn.advantages!r}; choose one of {', '.join(ADVANTAGES)}"),
            (learn.entropy_coeff >= 0, "entropy_coeff must be 0 or more"),
            (learn.stall_patience >= 0 and learn.stall_entropy >= 0,
             "stall_patience and stall_entropy must be 0 or more"),
            (0 < learn.stall_shrink <= 1, "stall_shrink must be above 0 and at most 1"),
            (learn.replay_episodes >= 0 and learn.num_epochs >= 1,
             "replay_episodes must be 0 or more and num_epochs at least 1"),
            (learn.replay in ("elite", "recent"), "replay must be elite or recent"),
            (learn.start in ("uniform", "best_single"), "start must be uniform or best_single"),
            (learn.reward in REWARDS + ("",),
             f"unknown reward {learn.reward!r}; choose one of {', '.join(REWARDS)}"),
            (env.memory_penalty in MEMORY_PENALTIES, "memory_penalty must be graded, flat or repair"),
            (run.wandb in ("offline", "online", "disabled"), "wandb must be offline, online or disabled"),
            (run.budget >= 1 or (run.budget == 0 and bool(run.init)),
             "budget must be at least 1 placement (0 places zero-shot with --init CHECKPOINT)"),
            (0 <= run.init_soften <= 1, "init_soften must be at most 1 (0: the method's own, 1: off)"),
            (run.init_soften in (0, 1) or bool(run.init),
             "init_soften spreads a pre-trained policy: pass --init CHECKPOINT with it"),
            (run.budget_unit in ("placements", "measurements"),
             "budget_unit must be placements or measurements"),
            (run.zero_shot_samples >= 1, "zero_shot_samples must be at least 1"),
            (aids.screen >= 0, "screen must be 0 (off) or a number of standard deviations"),
            (aids.imitate_steps >= 0, "imitate_steps must be 0 (off) or a number of steps"),
            (aids.refit_every == 0 or aids.refit_every >= 2,
             "refit_every must be 0 (off) or at least 2 placements per refit proposal"),
            (aids.neighbour_every in (-1, 0) or aids.neighbour_every >= 2,
             "neighbour_every must be -1 (auto), 0 (off) or at least 2 placements per neighbour"),
            (aids.neighbour_order in ("profile", "random"),
             f"unknown neighbour_order {aids.neighbour_order!r}; choose profile or random"),
            (learn.episode_len >= 1 and learn.episodes_per_iteration >= 1,
             "episode_len and episodes_per_iteration must be at least 1"),
            (run.env_runners >= 0, "env_runners must be 0 or more"),
            (learn.lr > 0, "lr must be positive"),
            (run.checkpoint_every >= 1, "checkpoint_every must be at least 1"),
            (run.torch_threads >= 1, "torch_threads must be at least 1"),
            (env.sim_delay_s >= 0, "sim_delay_s must be 0 or more"),
            (0 < aids.incumbent_share <= 1, "incumbent_share must be above 0 and at most 1"),
            (aids.exact_start in ("auto", "on", "off"),  # not a backend name: exact_start's choice
             "exact_start must be auto, on or off"),
            (env.remeasure_rounds >= 1 and env.solver_time_limit > 0,
             "remeasure_rounds must be at least 1 and solver_time_limit positive"),
            (t.repeats >= 1 and t.threads >= 0 and t.timeout_s > 0,
             "repeats must be >= 1, threads >= 0 and timeout_s > 0"),
            (0 <= t.precision < 1 and t.precision_cap_s > 0,
             "precision must be a fraction from 0 to below 1 (0.02: +/-2%; 0: exactly repeats "
             "blocks) and precision_cap_s a positive number of seconds"),
        ]
        for ok, msg in checks:
            if not ok:
                raise UsageError(msg)
        if run.init and not Path(run.init).exists():
            raise UsageError(f"pre-trained checkpoint {run.init} does not exist; pass the folder "
                             "python -m hsdag_ray.pretrain printed")
        for what, path in (("profile", env.profile), ("sim-profile", env.sim_profile)):
            if path and not Path(path).is_file():
                raise UsageError(f"{what} file {path} does not exist; record one with "
                                 "python -m hsdag_ray.profile")
        if env.sim_profile and not (env.backend in BACKENDS and BACKENDS[env.backend].simulated):
            raise UsageError("--sim-profile is what the simulator measures with; add "
                             "--backend simulator (a real backend measures the machine itself)")

    def profile_measured(self, backend: str) -> bool:
        """Whether a run on ``backend`` (resolved) measures its own profile: a simulated
        backend without ``sim_profile``; then its exact solver's placement is the optimum."""
        from envs.backends import BACKENDS

        kind = BACKENDS.get(backend)  # a measuring backend's own name (openvino-auto) is no kind
        return kind is not None and kind.simulated and not self.env.sim_profile

    def starts_exact(self, backend: str) -> bool:
        """Whether ``exact_start`` is on for a run on ``backend`` (auto: with ``guide``)."""
        if self.aids.exact_start == "auto":  # not a backend name: exact_start's choice
            return self.run.guide
        return self.aids.exact_start == "on"

    @classmethod
    def from_yaml(cls, path: str) -> "TrainConfig":
        """The defaults with the settings a YAML file (``--config``) names, nested by section
        or flat, e.g.::

            run: {model: resnet50, method: hsdag, budget: 200}
            hsdag: {grouping_noise: 0.5}
        """
        return cls().with_settings(read_yaml_mapping(path, "config file"), source=str(path))


#: the run's sections: name -> settings class (``--help`` groups by them, YAML nests by them)
SECTIONS: dict[str, type] = {f.name: f.default_factory().__class__ for f in fields(TrainConfig)}
#: section names of earlier releases (their settings are read flat)
OLD_SECTIONS = ("run details", "guide")


def settings_of(cls: type) -> tuple[str, ...]:
    """The settings of a section class: its fields, less those the run sets itself
    (``metadata={"setting": False}``)."""
    return tuple(f.name for f in fields(cls) if f.metadata.get("setting", True))


def setting_index() -> dict[str, tuple[str, ...]]:
    """Every setting's name -> the sections that have it (one, but for ``hidden_dim``)."""
    index: dict[str, tuple[str, ...]] = {}
    for section, cls in SECTIONS.items():
        for name in settings_of(cls):
            index[name] = index.get(name, ()) + (section,)
    return index


def expand(key: str, value: Any, source: str = "the settings") -> list[tuple[str, str, Any]]:
    """What setting ``key`` = ``value`` sets, as ``(section, name, value)``: ``key`` is
    ``section.name``, a name one section has, or an earlier release's (:data:`RENAMED`);
    anything else is a :class:`UsageError` naming ``source``."""
    index = setting_index()
    if key in RENAMED:
        return RENAMED[key](value)
    if "." in key and key.split(".", 1)[0] in SECTIONS:
        section, name = key.split(".", 1)
        if name not in settings_of(SECTIONS[section]):
            raise UsageError(f"{name!r} is not a {section} setting (in {source}); its "
                             f"settings are {', '.join(settings_of(SECTIONS[section]))}")
        return [(section, name, value)]
    if len(index.get(key, ())) == 1:
        return [(index[key][0], key, value)]
    if key in index:
        raise UsageError(f"{key!r} in {source} is a setting of several sections; write "
                         + " or ".join(f"{s}.{key}" for s in index[key]))
    raise UsageError(f"unknown setting {key!r} in {source}; settings are the long options of "
                     "--help without dashes (or section.name)")


def _renamed(section: str, name: str, convert=lambda v: v):
    return lambda v: [(section, name, convert(v))]


#: flat names of earlier releases -> what they set now (old YAML files, flags and run
#: folders keep working)
RENAMED = {
    "gcn_layers": _renamed("hsdag", "num_gcn_layers"),
    "start_logit": _renamed("hsdag", "prior_logit"),
    "timeout": _renamed("timing", "timeout_s"),
    "relative_features": _renamed("features", "relative"),
    **{f"no_{n}": _renamed("features", n, lambda v: not v)
       for n in ("fractal", "shape", "op_type", "degree", "cost")},
    "hidden_dim": lambda v: [(s, "hidden_dim", v) for s in ("hsdag", "placeto", "rnn", "gdp")],
    "rnn_groups": lambda v: [("rnn", "grouper", int(v) > 0), ("rnn", "num_groups", max(1, int(v)))],
}
