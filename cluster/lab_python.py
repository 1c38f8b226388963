"""What the lab hosts must see of the launching Python, whichever way it was installed.

    python cluster/lab_python.py --hidden /tmp,/root [FOLDER ...]

Every lab host of ``cluster/local_lab.sh`` has its own ``/tmp`` and an empty ``/root``,
so an interpreter that lives there (a venv under ``/tmp``, pyenv's Pythons under
``/root``, a venv whose base interpreter is pyenv's) would be missing on the hosts, and
their ``python3`` would fall back to the system's. This prints, one per line, the
folders of this interpreter that lie under a hidden root: its prefix, its base
prefix, the folder of its real executable, every entry of ``sys.path`` (site
folders) and the folders named (the project, which an editable install reads), each
folder once (a folder inside another is dropped).
``local_lab.sh`` binds each of them into the hosts at the same path, so the hosts run
the very interpreter and packages that launched the lab: venv, pyenv, conda or the
system's.

    python cluster/lab_python.py --writable

prints the site folders that ``pip install`` must write in when this interpreter is a
venv without a user site folder (pip cannot fall back to ``--user`` there): the lab
gives each host a layer of its own over them.
"""
from __future__ import annotations

import argparse
import os
import site
import sys
import sysconfig
from pathlib import PurePosixPath
from typing import Iterable, Sequence

__all__ = ["needed", "hidden_folders", "writable"]


def needed() -> list[str]:
    """The folders this interpreter reads: prefixes, its real executable's folder and
    ``sys.path`` (existing folders only, resolved through symlinks and kept as given)."""
    found: list[str] = []
    candidates = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
                  os.path.dirname(sys.executable),
                  os.path.dirname(os.path.realpath(sys.executable)), *sys.path]
    for path in candidates:
        if not path or not os.path.isdir(path):
            continue
        for p in (os.path.abspath(path), os.path.realpath(path)):
            if p not in found:
                found.append(p)
    return found


def hidden_folders(paths: Iterable[str], hidden: Sequence[str]) -> list[str]:
    """The folders of ``paths`` under one of ``hidden`` (a hidden root itself is never
    returned: binding all of ``/tmp`` would undo the host's own), outermost only, sorted."""
    roots = [PurePosixPath(h) for h in hidden]
    inside = sorted({str(PurePosixPath(p)) for p in paths
                     if any(PurePosixPath(p) != r and PurePosixPath(p).is_relative_to(r) for r in roots)})
    keep: list[str] = []
    for p in inside:  # sorted: a folder comes before the folders inside it
        if not any(PurePosixPath(p).is_relative_to(k) for k in keep):
            keep.append(p)
    return keep


def writable() -> list[str]:
    """The site folders ``pip install`` writes in, where it cannot install for the user
    instead: a venv whose user site folder is off (one made without
    ``--system-site-packages``); otherwise none."""
    if sys.prefix == sys.base_prefix or site.ENABLE_USER_SITE:
        return []
    paths = sysconfig.get_paths()
    return sorted({paths["purelib"], paths["platlib"]})


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hidden", default="/tmp,/root",
                    help="comma-separated roots the hosts do not share (default /tmp,/root)")
    ap.add_argument("folders", nargs="*", help="more folders the hosts must see (the project's)")
    ap.add_argument("--writable", action="store_true",
                    help="print the site folders pip must write in (a venv without a user site) instead")
    args = ap.parse_args(argv)
    folders = writable() if args.writable else \
        hidden_folders(needed() + [os.path.realpath(f) for f in args.folders], [h for h in args.hidden.split(",") if h])
    for folder in folders:
        print(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
