"""What every command line of hsdag_ray shares: one-sentence errors, exit code 2,
and the timing and device options of the commands that measure."""
from __future__ import annotations

import argparse
import sys
from typing import Callable, Optional, Sequence

from envs.base import TimingConfig
from hsdag_ray.core.costgraph import InvalidCostGraph
from hsdag_ray.core.errors import GraphError

__all__ = ["UsageError", "RunError", "USER_ERRORS", "run", "add_timing_args", "timing_from_args",
           "resolve_devices", "describe_devices"]


class UsageError(ValueError):
    """Bad input from the user: the message says what is wrong and how to fix it."""


class RunError(RuntimeError):
    """A run that cannot go on (e.g. no machine can measure): the message says why."""


#: exceptions that mean the input was wrong, not the program
USER_ERRORS = (UsageError, GraphError, InvalidCostGraph)


def run(main: Callable[[Optional[Sequence[str]]], int], argv: Optional[Sequence[str]] = None,
        prog: str = "hsdag_ray") -> int:
    """Call ``main(argv)``; turn a user error into one line on stderr and exit 2."""
    try:
        return main(argv)
    except USER_ERRORS as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    except RunError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130


def read_yaml_mapping(path: str, what: str) -> dict:
    """The mapping a YAML settings file holds; a :class:`UsageError` naming ``what``
    (e.g. ``"config file"``) when it is missing, not YAML or not a mapping."""
    from pathlib import Path

    import yaml

    p = Path(path)
    if not p.is_file():
        raise UsageError(f"{what} {path} does not exist")
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as e:
        raise UsageError(f"{what} {path} is not valid YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise UsageError(f"{what} {path} must be a mapping of settings")
    return data


def add_timing_args(ap: argparse.ArgumentParser) -> None:
    t = TimingConfig()
    g = ap.add_argument_group("timing (real backends)")
    g.add_argument("--warmup", type=int, default=t.warmup, help=f"untimed runs (default {t.warmup})")
    g.add_argument("--repeats", type=int, default=t.repeats,
                   help=f"timed blocks, the latency is their median (default {t.repeats})")
    g.add_argument("--block", type=int, default=t.block, help=f"runs per timed block (default {t.block})")
    g.add_argument("--threads", type=int, default=t.threads,
                   help=f"inference threads per device, 0 = plugin default (default {t.threads})")
    g.add_argument("--timeout", type=float, default=t.timeout_s,
                   help=f"seconds allowed per measurement (default {t.timeout_s:g})")


def timing_from_args(args: argparse.Namespace, validate: bool = False) -> TimingConfig:
    for k in ("repeats", "block"):
        if getattr(args, k) < 1:
            raise UsageError(f"--{k} must be at least 1")
    if args.warmup < 0 or args.threads < 0 or args.timeout <= 0:
        raise UsageError("--warmup and --threads must be >= 0 and --timeout > 0")
    return TimingConfig(warmup=args.warmup, repeats=args.repeats, block=args.block,
                        timeout_s=args.timeout, threads=args.threads, validate_outputs=validate)


def resolve_devices(specs: Sequence[str], threads: int) -> list[str]:
    """Check real/virtual device specs; return the device names; say what each is."""
    from envs.openvino_backend import check_devices

    try:
        infos = check_devices(list(specs), default_threads=threads)
    except ValueError as e:
        raise UsageError(str(e)) from None
    return [i.name for i in infos]


def describe_devices(specs: Sequence[str], threads: int) -> list[str]:
    from envs.openvino_backend import DeviceSet

    return DeviceSet(list(specs), default_threads=threads).describe()
