"""A run folder: where a run's config, metrics, state and outputs live."""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any, Callable, NamedTuple, Optional

from hsdag_ray.cli import UsageError, writable_dir
from hsdag_ray.run.config import TrainConfig

__all__ = ["Run", "Restored", "absolute", "KEEP_CHECKPOINTS"]

#: complete checkpoints a run folder keeps (the latest and the one before, its fallback)
KEEP_CHECKPOINTS = 2
#: written last into a checkpoint folder: every other file's size and SHA-256
MANIFEST = "MANIFEST.json"


def absolute(path: str | Path) -> Path:
    """``path`` with ``~`` expanded, made absolute and its symlinks resolved."""
    return Path(path).expanduser().resolve()


def slug(text: str) -> str:
    """``text`` as a file-name part: runs of other characters than letters, digits, ``_.-`` become ``_``."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")


def absolute_model(spec: str) -> str:
    """``spec`` with a model file's path (``doppler:FILE.txt``, ``.xml``, ``.onnx``) made
    absolute; any other spec unchanged."""
    if spec.startswith("doppler:"):
        return "doppler:" + str(absolute(spec[len("doppler:"):]))
    if Path(spec).suffix.lower() in (".xml", ".onnx"):
        return str(absolute(spec))
    return spec


def model_label(model: str) -> str:
    """A model spec as a run-name part: a file's stem (``doppler_`` and the stem for a
    ``doppler:FILE.txt``), else the spec slugged (``tv:convnext_tiny`` -> ``tv_convnext_tiny``:
    no ``:`` that scp or rsync would read as a host)."""
    if model.startswith("doppler:"):
        return slug("doppler_" + Path(model[len("doppler:"):]).stem)
    return slug(Path(model).stem if Path(model).suffix in (".xml", ".onnx") else model)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_durably(path: Path, text: str) -> None:
    """``path`` holds ``text`` or what it held before, whenever the process dies."""
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST)


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _damage(folder: Path) -> Optional[str]:
    """Why the checkpoint ``folder`` cannot be trusted, or None when every file its
    manifest names is there with its size and hash."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
        files = manifest["files"]
    except FileNotFoundError:
        return "no manifest: it was not completed"
    except (ValueError, KeyError, TypeError):
        return "its manifest cannot be read"
    for rel, want in files.items():
        p = folder / rel
        if not p.is_file():
            return f"{rel} is missing"
        if p.stat().st_size != want["size"]:
            return f"{rel} has {p.stat().st_size} bytes instead of {want['size']}"
        if _digest(p) != want["sha256"]:
            return f"{rel} differs from what was written"
    return None


class Restored(NamedTuple):
    """A verified checkpoint: its iteration, the policy's folder (``driver.restore``),
    the run state and the measurement store's state saved with it."""

    iteration: int
    folder: Path
    policy: Path
    state: dict[str, Any]
    store: dict[str, Any]


class Run:
    """A run folder: config, metrics, checkpoints, outputs.

    A run's state advances in one step per checkpoint: ``checkpoints/<iteration>/``
    holds the policy (``policy/``), ``state.json`` and ``store.json``, its files synced
    and ``MANIFEST.json`` (each file's size and SHA-256) written last, built under a
    temporary name and renamed into place. The latest two are kept; ``checkpoint``
    (a link to the latest's ``policy/``), ``state.json`` and ``store.json`` at the top
    are copies for readers, never read back. ``metrics.jsonl`` may run ahead of the
    latest checkpoint; a resumed run cuts it back to the checkpoint's iteration, so
    every iteration is in it exactly once.

    ``dir`` is always absolute, with ``~`` expanded and symlinks resolved,
    whatever ``--out`` or ``--resume`` the user gave: Ray and RLlib take
    paths as URIs and refuse relative ones, and Ray workers do not share the
    driver's working folder.
    """

    def __init__(self, cfg: TrainConfig, resume: Optional[Path]) -> None:
        if resume is not None:
            self.dir = absolute(resume)
        else:
            name = cfg.run.name or f"{model_label(cfg.run.model)}-{cfg.run.method}-{time.strftime('%Y%m%d-%H%M%S')}"
            self.dir = absolute(Path(cfg.run.out) / name)
            # a run that failed before it started left only what the libraries printed
            if self.dir.is_dir() and any(f.name != "libraries.log" for f in self.dir.iterdir()):
                raise UsageError(f"run folder {self.dir} exists already; choose another --name or "
                                 f"continue it with --resume {self.dir}")
        writable_dir(self.dir, "--resume" if resume is not None else "--out")
        self.metrics = self.dir / "metrics.jsonl"
        self.state_file = self.dir / "state.json"
        self.checkpoint = self.dir / "checkpoint"
        self.store_file = self.dir / "store.json"
        self.checkpoints = self.dir / "checkpoints"

    @staticmethod
    def fresh_state() -> dict[str, Any]:
        return {"iteration": 0, "log_index": 0, "wall_s": 0.0, "latencies": []}

    def state(self) -> dict[str, Any]:
        if self.state_file.is_file():
            return json.loads(self.state_file.read_text())
        return {"iteration": 0, "log_index": 0, "wall_s": 0.0, "latencies": []}

    def save_state(self, state: dict[str, Any]) -> None:
        _write_durably(self.state_file, json.dumps(state))

    def append_metrics(self, row: dict[str, Any]) -> None:
        with self.metrics.open("a") as f:
            f.write(json.dumps(row) + "\n")

    def write_json(self, name: str, data: Any) -> None:
        """``name`` in the run folder, whole or not at all."""
        _write_durably(self.dir / name, json.dumps(data, indent=1))

    # checkpoints -------------------------------------------------------------------

    def _complete(self) -> list[Path]:
        """Checkpoint folders (named by their iteration), latest first."""
        if not self.checkpoints.is_dir():
            return []
        return sorted((p for p in self.checkpoints.iterdir() if p.is_dir() and p.name.isdigit()),
                      key=lambda p: int(p.name), reverse=True)

    def has_checkpoint(self) -> bool:
        """True if the folder holds a checkpoint that is not known to be damaged
        (the new layout's, or an old run's ``checkpoint/`` with ``state.json``)."""
        if any(_damage(p) is None for p in self._complete()):
            return True
        return self._legacy() and self.state_file.is_file() and self.store_file.is_file()

    def _legacy(self) -> bool:
        """An old run folder: one ``checkpoint/`` folder, ``state.json`` and ``store.json``."""
        return not self.checkpoints.is_dir() and self.checkpoint.is_dir() \
            and not self.checkpoint.is_symlink()

    def commit_checkpoint(self, iteration: int, save_policy: Callable[[Path], None],
                          state: dict[str, Any], store: dict[str, Any]) -> Path:
        """Save ``checkpoints/<iteration>/`` in one step (see the class) and keep the
        latest :data:`KEEP_CHECKPOINTS`; an iteration checkpointed already is kept as it is."""
        self.checkpoints.mkdir(exist_ok=True)
        final = self.checkpoints / f"{iteration:06d}"
        if not (final.is_dir() and _damage(final) is None):
            tmp = self.checkpoints / f".tmp-{iteration:06d}"
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir()
            save_policy(tmp / "policy")
            (tmp / "state.json").write_text(json.dumps(state))
            (tmp / "store.json").write_text(json.dumps(store))
            files = _files(tmp)
            for p in files:
                _fsync(p)
            if self.metrics.is_file():  # the rows the checkpoint covers, durable before it
                _fsync(self.metrics)
            _write_durably(tmp / MANIFEST, json.dumps({"iteration": iteration, "files": {
                str(p.relative_to(tmp)): {"size": p.stat().st_size, "sha256": _digest(p)}
                for p in files}}))
            for d in sorted({p.parent for p in files} | {tmp}, key=lambda d: -len(d.parts)):
                _fsync(d)
            if final.exists():  # a damaged one of the same iteration
                trash = self.checkpoints / f".trash-{iteration:06d}"
                shutil.rmtree(trash, ignore_errors=True)
                final.rename(trash)
            tmp.rename(final)
            _fsync(self.checkpoints)
        self._publish(final)
        for old in self._complete()[KEEP_CHECKPOINTS:]:
            shutil.rmtree(old, ignore_errors=True)
        for left in self.checkpoints.glob(".t*-*"):  # temporary folders of killed sessions
            shutil.rmtree(left, ignore_errors=True)
        return final

    def _publish(self, final: Path) -> None:
        """The top-level views of checkpoint ``final``: ``checkpoint`` linked to its
        policy, copies of its ``state.json`` and ``store.json``."""
        if self.checkpoint.is_dir() and not self.checkpoint.is_symlink():
            shutil.rmtree(self.checkpoint)  # an old run folder's, now checkpointed anew
        link = self.dir / ".checkpoint.link"
        link.unlink(missing_ok=True)
        link.symlink_to(final.relative_to(self.dir) / "policy")
        link.replace(self.checkpoint)
        for name in ("state.json", "store.json"):
            _write_durably(self.dir / name, (final / name).read_text())

    def restore_point(self, say=print) -> Optional[Restored]:
        """The latest checkpoint that verifies (a damaged one is set aside as
        ``checkpoints/.damaged-<iteration>`` and the one before used, saying so); None
        when the run never reached one (it starts from the beginning). A folder with
        progress but no usable checkpoint is refused: a resumed run never silently
        starts a fresh policy."""
        why = None
        for folder in self._complete():
            why = _damage(folder)
            if why is None:
                try:
                    state = json.loads((folder / "state.json").read_text())
                    store = json.loads((folder / "store.json").read_text())
                    return Restored(int(state["iteration"]), folder, folder / "policy", state, store)
                except (ValueError, KeyError, TypeError) as e:
                    why = f"its state cannot be read ({type(e).__name__})"
            say(f"checkpoint {folder.name} of {self.dir.name} is damaged ({why}); "
                "falling back to the one before")
            aside = self.checkpoints / f".damaged-{folder.name}"
            shutil.rmtree(aside, ignore_errors=True)
            folder.rename(aside)
        if why is not None:
            raise UsageError(f"no checkpoint of {self.dir} is intact (the last one: {why}), so "
                             "the run cannot be resumed; start a new run")
        if self._legacy():
            try:
                state = json.loads(self.state_file.read_text())
                store = json.loads(self.store_file.read_text())
                if not any(self.checkpoint.iterdir()):
                    raise FileNotFoundError("empty")
                return Restored(int(state["iteration"]), self.checkpoint, self.checkpoint, state, store)
            except (OSError, ValueError, KeyError, TypeError) as e:
                raise UsageError(f"the checkpoint of {self.dir} (the old layout: checkpoint/, "
                                 f"state.json, store.json) is damaged ({type(e).__name__}), so the "
                                 "run cannot be resumed; start a new run") from None
        if self.state_file.is_file() or self.store_file.is_file() or self._metrics_rows():
            raise UsageError(f"{self.dir} holds a run's progress but no checkpoint (checkpoints/ "
                             "is missing), so the run cannot be resumed; start a new run")
        say(f"{self.dir.name} has no checkpoint yet: the run starts from the beginning")
        return None

    def _metrics_rows(self) -> list[dict[str, Any]]:
        rows = []
        if self.metrics.is_file():
            for line in self.metrics.read_text().splitlines():
                try:
                    rows.append(json.loads(line))
                except ValueError:  # a line cut short by a kill
                    continue
        return [r for r in rows if isinstance(r, dict) and "iteration" in r]

    def truncate_metrics(self, iteration: int) -> None:
        """Cut ``metrics.jsonl`` back to the rows of iterations 1..``iteration``, one each
        (the last written of an iteration wins): those after the checkpoint are run again."""
        if not self.metrics.is_file():
            return
        rows = {r["iteration"]: r for r in self._metrics_rows() if r["iteration"] <= iteration}
        _write_durably(self.metrics, "".join(json.dumps(rows[k]) + "\n" for k in sorted(rows)))
