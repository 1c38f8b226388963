"""What every command line of hsdag_ray shares: one-sentence errors, exit code 2."""
from __future__ import annotations

import sys
from typing import Callable, Optional, Sequence

from hsdag_ray.costgraph import InvalidCostGraph
from hsdag_ray.graph import GraphError

__all__ = ["UsageError", "USER_ERRORS", "run"]


class UsageError(ValueError):
    """Bad input from the user: the message says what is wrong and how to fix it."""


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
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
