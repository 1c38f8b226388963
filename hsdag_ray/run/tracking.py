"""Weights & Biases tracking, offline by default, switched off with one flag."""
from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

__all__ = ["Tracker"]


class Tracker:
    """Logs a run's config, per-iteration metrics and best placement to W&B.

    ``mode`` is ``offline`` (no account needed; sync later with ``wandb
    sync``), ``online`` or ``disabled`` (nothing is imported or written).
    """

    def __init__(self, mode: str, project: str, run_dir: Path, config: Mapping[str, Any],
                 name: Optional[str] = None, resume: bool = False) -> None:
        self.run = None
        if mode == "disabled":
            return
        import wandb

        id_file = Path(run_dir) / "wandb_id.txt"
        run_id = id_file.read_text().strip() if resume and id_file.is_file() else uuid.uuid4().hex[:8]
        id_file.write_text(run_id)
        self.run = wandb.init(project=project, name=name, config=dict(config), mode=mode,
                              dir=str(run_dir), id=run_id, resume="allow",
                              settings=wandb.Settings(silent=True, console="off"))

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        if self.run is not None:
            self.run.log({k: v for k, v in metrics.items() if v is not None}, step=step)

    def finish(self, summary: Mapping[str, Any], files: Sequence[Path]) -> None:
        if self.run is None:
            return
        import wandb

        for k, v in summary.items():
            if isinstance(v, (int, float, str)) or v is None:
                self.run.summary[k] = v
        art = wandb.Artifact(f"best-placement-{self.run.id}", type="placement")
        for f in files:
            if Path(f).is_file():
                art.add_file(str(f))
        self.run.log_artifact(art)
        self.run.finish()
