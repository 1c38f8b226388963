"""What a command prints while it works."""
from __future__ import annotations

from typing import Callable

__all__ = ["say"]


def say(quiet: bool) -> Callable[[str], None]:
    """A function printing one line to stderr (nothing when ``quiet``)."""
    from rich.console import Console

    out = Console(stderr=True, highlight=False, soft_wrap=True)
    return (lambda msg: None) if quiet else (lambda msg: out.print(msg))
