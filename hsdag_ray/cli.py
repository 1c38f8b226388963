"""What every command line of hsdag_ray shares: one-sentence errors, exit code 2,
and the device options of the commands that measure (their timing flags:
:func:`hsdag_ray.flags.add_timing_args`)."""
from __future__ import annotations

import sys
from typing import Callable, Optional, Sequence

from hsdag_core.costgraph import InvalidCostGraph
from hsdag_core.errors import GraphError

__all__ = ["UsageError", "RunError", "USER_ERRORS", "run", "resolve_devices", "describe_devices", "writable_dir", "writable_file"]


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


def _why_not_writable(path, e: OSError) -> str:
    """Why ``path`` could not be made or written, in words (``e``: the error it gave)."""
    import errno

    for parent in [path, *path.parents]:
        if parent.exists():
            if not parent.is_dir():
                return f"{parent} is a file, not a folder"
            break
    if e.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    if e.errno == errno.EROFS:
        return "the file system is read-only"
    return e.strerror or str(e)


def writable_dir(path, flag: str = "--out"):
    """``path`` (a :class:`~pathlib.Path`) made with its parents and checked writable; a
    :class:`UsageError` naming ``flag`` and why when it cannot be (a file in the way, no
    permission, a read-only file system)."""
    import tempfile
    from pathlib import Path

    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as e:
        raise UsageError(f"cannot write to the folder {path} ({_why_not_writable(path, e)}); "
                         f"give {flag} a folder you can write to") from None
    return path


def writable_file(path, flag: str = "--out"):
    """``path`` checked, before anything is done, to be a file that can be written: not a
    folder, and its nearest existing folder writable (nothing is made); a
    :class:`UsageError` naming ``flag`` and why when it is not."""
    import os
    from pathlib import Path

    path = Path(path).absolute()
    if path.is_dir():
        raise UsageError(f"{flag} {path} is a folder; give {flag} a file name, e.g. "
                         f"{path / 'out.json'}")
    for parent in path.parents:
        if parent.exists():
            why = (f"{parent} is a file, not a folder" if not parent.is_dir() else
                   "permission denied" if not os.access(parent, os.W_OK | os.X_OK) else "")
            if why:
                raise UsageError(f"cannot write {path} ({why}); give {flag} a file in a folder "
                                 "you can write to")
            break
    return path


def resolve_devices(specs: Sequence[str], threads: int, backend: str = "auto",
                    here: bool = True) -> list[str]:
    """Check the device specs of ``backend`` (OpenVINO's real or virtual devices, or the
    torch backend's ``cpu`` / ``cuda:N``); return the device names.
    ``here=False`` (a run on a cluster, measured on other machines): torch devices are only
    read, not looked for on this machine."""
    from envs.backends import get

    try:
        return get(backend).check_devices(list(specs), threads, here)
    except ValueError as e:
        raise UsageError(str(e)) from None


def describe_devices(specs: Sequence[str], threads: int, backend: str = "auto") -> list[str]:
    """What each device of ``backend`` named by ``specs`` is, one line each."""
    from envs.backends import get

    return get(backend).describe_devices(list(specs), threads)
