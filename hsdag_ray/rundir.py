"""A run folder: where a run's config, metrics, state and outputs live."""
from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any, Optional

from hsdag_ray.cli import UsageError, writable_dir
from hsdag_ray.config import TrainConfig

__all__ = ["Run", "absolute"]


def absolute(path: str | Path) -> Path:
    """``path`` with ``~`` expanded, made absolute and its symlinks resolved."""
    return Path(path).expanduser().resolve()


def slug(text: str) -> str:
    """``text`` as a file-name part: runs of other characters than letters, digits, ``_.-`` become ``_``."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")


def model_label(model: str) -> str:
    """A model spec as a run-name part: a file's stem, else the spec slugged
    (``tv:convnext_tiny`` -> ``tv_convnext_tiny``: no ``:`` that scp or rsync would read as a host)."""
    return slug(Path(model).stem if Path(model).suffix in (".xml", ".onnx") else model)


class Run:
    """A run folder: config, metrics, checkpoints, outputs.

    ``dir`` is always absolute, with ``~`` expanded and symlinks resolved,
    whatever ``--out`` or ``--resume`` the user gave: Ray and RLlib take
    paths as URIs and refuse relative ones, and Ray workers do not share the
    driver's working folder.
    """

    def __init__(self, cfg: TrainConfig, resume: Optional[Path]) -> None:
        if resume is not None:
            self.dir = absolute(resume)
        else:
            name = cfg.name or f"{model_label(cfg.model)}-{cfg.method}-{time.strftime('%Y%m%d-%H%M%S')}"
            self.dir = absolute(Path(cfg.out) / name)
            # a run that failed before it started left only what the libraries printed
            if self.dir.is_dir() and any(f.name != "libraries.log" for f in self.dir.iterdir()):
                raise UsageError(f"run folder {self.dir} exists already; choose another --name or "
                                 f"continue it with --resume {self.dir}")
        writable_dir(self.dir, "--resume" if resume is not None else "--out")
        self.metrics = self.dir / "metrics.jsonl"
        self.state_file = self.dir / "state.json"
        self.checkpoint = self.dir / "checkpoint"
        self.store_file = self.dir / "store.json"

    def state(self) -> dict[str, Any]:
        if self.state_file.is_file():
            return json.loads(self.state_file.read_text())
        return {"iteration": 0, "log_index": 0, "wall_s": 0.0, "latencies": []}

    def save_state(self, state: dict[str, Any]) -> None:
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        tmp.replace(self.state_file)

    def append_metrics(self, row: dict[str, Any]) -> None:
        with self.metrics.open("a") as f:
            f.write(json.dumps(row) + "\n")
