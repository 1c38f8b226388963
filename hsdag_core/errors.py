"""Errors of the foundation: input that cannot become a placement problem."""
from __future__ import annotations

__all__ = ["GraphError"]


class GraphError(ValueError):
    """A model or graph file that cannot be turned into a placement graph."""
