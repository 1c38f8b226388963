"""The settings of a training run.

:class:`TrainConfig` is the one typed config of ``python -m hsdag_ray.train``: nested
sections (:data:`SECTIONS`), each a settings class whose fields carry their own type and
help: the library's own classes (the environment's :class:`envs.env_config.EnvConfig`,
:class:`envs.base.TimingConfig`, :class:`hsdag_core.features.FeatureConfig`, each learned
method's network config) and the run's own (:mod:`hsdag_ray.run.settings`). The types check
the choices (:func:`hsdag_ray.flags.choice_error`); :meth:`TrainConfig.validate` checks
what they cannot say. :meth:`TrainConfig.with_settings` reads settings nested by section
(a YAML file, a run's ``config.json``) or flat by name (a name several sections share,
``hidden_dim``, sets it in each; ``section.name`` sets one).
:mod:`hsdag_ray.arguments` makes the command line from the same fields.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from envs.base import TimingConfig
from envs.env_config import EnvConfig, backend_choices
from hsdag_core.features import FeatureConfig
from hsdag_ray.cli import UsageError, read_yaml_mapping
from hsdag_ray.flags import choice_error, settings_of
from hsdag_ray.run.settings import ALGOS, GuideSettings, LearningSettings, RunSettings
from policies.gdp.config import GDPConfig
from policies.hsdag.config import HSDAGConfig
from policies.placeto.config import PlacetoConfig
from policies.rnn.config import RNNPlacerConfig

__all__ = ["TrainConfig", "SECTIONS", "RUN_DEFAULTS", "RETIRED", "MEASURE_RESOURCE",
           "backend_choices", "ALGOS", "settings_of", "setting_index", "flag_of", "expand"]


#: the custom Ray resource a measuring machine advertises once (one measurement at a time)
MEASURE_RESOURCE = "measure_slot"

#: the run's sections: name -> settings class (``--help`` groups by them, YAML nests by
#: them); a subclass put here in place of a class adds its fields to every command line,
#: YAML file and run folder
SECTIONS: dict[str, type] = {
    "run": RunSettings, "env": EnvConfig, "timing": TimingConfig, "features": FeatureConfig,
    "learning": LearningSettings, "guide": GuideSettings, "hsdag": HSDAGConfig,
    "placeto": PlacetoConfig, "rnn": RNNPlacerConfig, "gdp": GDPConfig,
}
#: where a training run's defaults differ from a library class's own
RUN_DEFAULTS: dict[str, dict[str, Any]] = {
    "env": {"backend": "default"}, "timing": {"repeats": 5}, "hsdag": {"incumbent_prior": -1.0},
}
#: flat names of settings since renamed -> the flag that replaced them (for the error)
RETIRED = {"gcn_layers": "--num-gcn-layers", "start_logit": "--prior-logit",
           "timeout": "--timeout-s", "precision_cap": "--precision-cap-s",
           "relative_features": "--relative", "rnn_groups": "--grouper and --num-groups",
           **{f"no_{n}": f"--no-{n} ({n}: false)" for n in ("fractal", "shape", "op_type", "degree", "cost")}}


def _section(name: str):
    return field(default_factory=lambda: SECTIONS[name](**RUN_DEFAULTS.get(name, {})))


@dataclass(frozen=True)
class TrainConfig:
    """One training run, by section. The command line and a YAML file (``--config``,
    nested by section or flat) fill it; each section's fields say what they do."""

    run: RunSettings = _section("run")
    env: EnvConfig = _section("env")
    timing: TimingConfig = _section("timing")
    features: FeatureConfig = _section("features")
    learning: LearningSettings = _section("learning")
    guide: GuideSettings = _section("guide")
    hsdag: HSDAGConfig = _section("hsdag")
    placeto: PlacetoConfig = _section("placeto")
    rnn: RNNPlacerConfig = _section("rnn")
    gdp: GDPConfig = _section("gdp")

    @classmethod
    def of(cls, **settings: Any) -> "TrainConfig":
        """The defaults with ``settings`` (flat names or ``section.name``) changed."""
        return cls().with_settings(settings)

    def replace(self, **settings: Any) -> "TrainConfig":
        """This config with ``settings`` (flat names or ``section.name``) changed."""
        return self.with_settings(settings)

    def with_settings(self, values: Mapping[str, Any], source: str = "the settings") -> "TrainConfig":
        """This config with ``values`` changed: sections as mappings (``{"learning": {"lr":
        0.01}}``), ``section.name`` keys or flat names. A name no section has, or a value
        its section's types or checks refuse, is a :class:`UsageError` naming ``source``."""
        updates: dict[str, dict[str, Any]] = {}
        for key, value in values.items():
            if key in SECTIONS and isinstance(value, Mapping):
                own = settings_of(SECTIONS[key])
                wrong = [k for k in value if k not in own]
                if wrong:
                    where = setting_index().get(wrong[0])
                    raise UsageError(
                        f"{wrong[0]!r} in section {key!r} of {source} is not a {key} setting"
                        + (f"; it is a {' or '.join(where)} setting" if where else "")
                        + f" ({key}'s settings are {', '.join(own)})")
                items = [(f"{key}.{k}", v) for k, v in value.items()]
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
            wrong = choice_error(SECTIONS[section], changed[section])
            if wrong:
                raise UsageError(f"{wrong} (in {source})")
        return dataclasses.replace(self, **changed)

    def to_dict(self) -> dict[str, Any]:
        """The settings nested by section (what ``config.json`` and W&B keep)."""
        return {name: {k: getattr(getattr(self, name), k) for k in settings_of(cls)}
                for name, cls in SECTIONS.items()}

    def validate(self) -> None:
        """Refuse what the settings' types cannot: ranges, settings that need another, and
        files that are not there (a :class:`UsageError`, one sentence each)."""
        from envs.backends import BACKENDS, objective_error

        run, env, guide = self.run, self.env, self.guide
        checks = [
            (objective_error(env.backend, env.objective) if env.backend in BACKENDS else ""),
            env.range_error(),
            "" if run.budget >= 1 or (run.budget == 0 and bool(run.init)) else
            "budget must be at least 1 placement (0 places zero-shot with --init CHECKPOINT)",
            "" if 0 <= run.init_soften <= 1 else
            "init_soften must be at most 1 (0: the method's own, 1: off)",
            "" if run.init_soften in (0, 1) or bool(run.init) else
            "init_soften spreads a pre-trained policy: pass --init CHECKPOINT with it",
            "" if run.zero_shot_samples >= 1 else "zero_shot_samples must be at least 1",
            "" if run.env_runners >= 0 else "env_runners must be 0 or more",
            "" if run.checkpoint_every >= 1 and run.torch_threads >= 1 else
            "checkpoint_every and torch_threads must be at least 1",
            "" if run.remeasure_rounds >= 1 and run.solver_time_limit > 0 else
            "remeasure_rounds must be at least 1 and solver_time_limit positive",
            "" if guide.imitate_steps >= 0 else "imitate_steps must be 0 (off) or a number of steps",
            "" if guide.refit_every == 0 or guide.refit_every >= 2 else
            "refit_every must be 0 (off) or at least 2 placements per refit proposal",
            "" if guide.neighbour_every in (-1, 0) or guide.neighbour_every >= 2 else
            "neighbour_every must be -1 (auto), 0 (off) or at least 2 placements per neighbour",
        ]
        why = next((c for c in checks if c), "")
        if why:
            raise UsageError(why)
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
        if self.guide.exact_start == "auto":  # not a backend name: exact_start's choice
            return self.run.guide
        return self.guide.exact_start == "on"

    @classmethod
    def from_yaml(cls, path: str) -> "TrainConfig":
        """The defaults with the settings a YAML file (``--config``) names, nested by section
        or flat, e.g.::

            run: {model: resnet50, method: hsdag, budget: 200}
            hsdag: {grouping_noise: 0.5}
        """
        return cls().with_settings(read_yaml_mapping(path, "config file"), source=str(path))


def setting_index() -> dict[str, tuple[str, ...]]:
    """Every setting's name -> the sections that have it (one, but for ``hidden_dim``)."""
    index: dict[str, tuple[str, ...]] = {}
    for section, cls in SECTIONS.items():
        for name in settings_of(cls):
            index[name] = index.get(name, ()) + (section,)
    return index


def flag_of(section: str, name: str) -> str:
    """A setting's flag: ``--name``, or ``--section.name`` when several sections have it."""
    shared = len(setting_index().get(name, ())) > 1
    return "--" + (f"{section}." if shared else "") + name.replace("_", "-")


def expand(key: str, value: Any, source: str = "the settings") -> list[tuple[str, str, Any]]:
    """What setting ``key`` = ``value`` sets, as ``(section, name, value)``: ``key`` is
    ``section.name``, or a name, which sets it in every section that has it; anything else (a renamed setting's old name
    among them, :data:`RETIRED`) is a :class:`UsageError` naming ``source``."""
    index = setting_index()
    if "." in key and key.split(".", 1)[0] in SECTIONS:
        section, name = key.split(".", 1)
        if name not in settings_of(SECTIONS[section]):
            raise UsageError(f"{name!r} is not a {section} setting (in {source}); its "
                             f"settings are {', '.join(settings_of(SECTIONS[section]))}")
        return [(section, name, value)]
    if key in index:  # a name several sections share (hidden_dim) sets it in each
        return [(section, key, value) for section in index[key]]
    if key in RETIRED:
        raise UsageError(f"{key!r} in {source} was renamed; it is now {RETIRED[key]}")
    raise UsageError(f"unknown setting {key!r} in {source}; settings are the long options of "
                     "--help without dashes (or section.name)")
