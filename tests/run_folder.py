"""What a reader sees in a run folder: its metrics rows, its stores and its checkpoints
(test_reliability.py, test_checkpoints.py, test_train.py and test_memory_limits.py read run
folders with these)."""
import json
from pathlib import Path


def rows(run: Path) -> list[dict]:
    out = []
    if (run / "metrics.jsonl").is_file():
        for line in (run / "metrics.jsonl").read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def stores(run: Path) -> list[dict]:
    """Every store a reader can see in the run folder: the complete checkpoints' and the top copy."""
    found = []
    files = [run / "store.json"] + [d / "store.json" for d in (run / "checkpoints").glob("[0-9]*")
                                    if (d / "MANIFEST.json").is_file()] if run.is_dir() else []
    for f in files:
        try:
            found.append(json.loads(f.read_text()))
        except (OSError, ValueError):
            pass  # a checkpoint folder pruned while read
    return found


def keys(store: dict) -> set[str]:
    return {e["key"] for e in store["log"]}


def checkpoint_names(run: Path) -> set[str]:
    d = run / "checkpoints"
    return {p.name for p in d.iterdir()} if d.is_dir() else set()


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
