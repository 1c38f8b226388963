"""A run folder: where a run's config, metrics, state and outputs live."""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Optional

from hsdag_ray.cli import UsageError
from hsdag_ray.config import TrainConfig

__all__ = ["Run"]


class Run:
    """A run folder: config, metrics, checkpoints, outputs."""

    def __init__(self, cfg: TrainConfig, resume: Optional[Path]) -> None:
        if resume is not None:
            self.dir = resume
        else:
            name = cfg.name or f"{Path(cfg.model).stem}-{cfg.method}-{time.strftime('%Y%m%d-%H%M%S')}"
            self.dir = Path(cfg.out) / name
            if self.dir.exists() and any(self.dir.iterdir()):
                raise UsageError(f"run folder {self.dir} exists already; choose another --name or "
                                 f"continue it with --resume {self.dir}")
        self.dir.mkdir(parents=True, exist_ok=True)
        self.metrics = self.dir / "metrics.jsonl"
        self.state_file = self.dir / "state.json"

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
