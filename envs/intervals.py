"""How precise a timing is, and when one timing beats another: the one place this is decided.

A real timing is a median of samples (block means of one measurement, or of several
interleaved rounds pooled) with a 95% confidence interval of that median. The interval is
distribution-free (it assumes independent samples, nothing about their shape): for ``n``
sorted samples, the number below the true median is Binomial(``n``, 1/2), so the
interval between order statistics ``x[k-1]`` and ``x[n-k]`` (0-based) covers the true
median with probability ``P(k <= B <= n-k)``, computed with ``scipy.stats.binom``;
:func:`median_interval` takes the narrowest such interval whose coverage reaches the
level asked. Timing noise is skewed (a busy machine only ever adds time), which breaks
a normal-theory interval and not this one. With fewer than 6 samples no pair of order
statistics reaches 95%; the interval is then the full range and its level (below 95%)
says so.

:func:`compare` words a comparison: one timing is faster than another only when their
intervals do not overlap; otherwise the two are "within the noise". Every table of real
timings (``measure``, ``apply``, the final re-measurement of ``train``, sweeps, the GPU
check) reads these fields through :class:`envs.base.Measurement` or :func:`interval_fields`.
"""
from __future__ import annotations

import math
from functools import lru_cache
from typing import Optional, Sequence

import numpy as np

__all__ = ["LEVEL", "median_interval", "interval_fields", "half_width", "compare",
           "speedup_interval", "interval_ms", "WITHIN_NOISE"]

#: the confidence level of every reported interval
LEVEL = 0.95
#: the words for two timings whose intervals overlap
WITHIN_NOISE = "within the noise"


def _coverage(n: int, k: int) -> float:
    """P(x[k-1] <= true median <= x[n-k]) for ``n`` independent samples (1-based ``k``)."""
    from scipy.stats import binom

    return float(binom.cdf(n - k, n, 0.5) - binom.cdf(k - 1, n, 0.5))


@lru_cache(maxsize=4096)
def _order_index(n: int, level: float) -> tuple[int, float]:
    """The 1-based ``k`` of the narrowest interval ``x[k-1]``, ``x[n-k]`` of ``n`` samples
    whose coverage reaches ``level`` (1, the full range, when none does), and its coverage."""
    from scipy.stats import binom

    ks = np.arange(1, n // 2 + 1)  # coverage falls as k grows: the last k that reaches level
    cov = binom.cdf(n - ks, n, 0.5) - binom.cdf(ks - 1, n, 0.5)
    reach = np.nonzero(cov >= level)[0]
    best = int(ks[reach[-1]]) if len(reach) else 1
    return best, _coverage(n, best)


def median_interval(samples: Sequence[float], level: float = LEVEL) -> tuple[float, float, float]:
    """``(low, high, coverage)``: the narrowest order-statistic interval of the median of
    ``samples`` covering it with probability at least ``level`` (module docstring); with
    too few samples for ``level``, the full range and its smaller coverage."""
    x = np.sort(np.asarray(samples, dtype=np.float64))
    n = len(x)
    if n == 0:
        return math.nan, math.nan, 0.0
    best, cov = _order_index(n, float(level))
    return float(x[best - 1]), float(x[n - best]), cov


def interval_fields(samples: Sequence[float]) -> dict[str, object]:
    """``median_s``, ``interval_s`` ([low, high]), ``interval_level`` and ``half_width``
    (half the interval over the median) of ``samples``, for a JSON row."""
    if not len(samples):
        return {"median_s": None, "interval_s": None, "interval_level": None, "half_width": None}
    med = float(np.median(samples))
    low, high, cov = median_interval(samples)
    return {"median_s": med, "interval_s": [low, high], "interval_level": cov,
            "half_width": half_width(med, (low, high))}


def half_width(median: float, interval: Optional[Sequence[float]]) -> Optional[float]:
    """Half the interval's width over the median (the relative precision of a timing)."""
    if interval is None or not median or not all(map(math.isfinite, interval)):
        return None
    return (interval[1] - interval[0]) / 2.0 / median


def compare(a: Optional[Sequence[float]], b: Optional[Sequence[float]]) -> str:
    """``"faster"`` when interval ``a`` lies wholly below ``b``, ``"slower"`` when wholly
    above, :data:`WITHIN_NOISE` when they overlap (or one is missing)."""
    if a is None or b is None:
        return WITHIN_NOISE
    if a[1] < b[0]:
        return "faster"
    if a[0] > b[1]:
        return "slower"
    return WITHIN_NOISE


def speedup_interval(fast: Optional[Sequence[float]], slow: Optional[Sequence[float]]
                     ) -> Optional[tuple[float, float]]:
    """A conservative interval of ``slow / fast`` from the two latencies' intervals: the
    slowest ``slow`` over the fastest ``fast`` bound it above, and the other way below."""
    if fast is None or slow is None or fast[0] <= 0 or fast[1] <= 0:
        return None
    return slow[0] / fast[1], slow[1] / fast[0]


def interval_ms(interval: Optional[Sequence[float]], digits: int = 3) -> str:
    """An interval in seconds as ``low-high`` in milliseconds, or ``-`` without one."""
    if not interval:
        return "-"
    return f"{interval[0] * 1e3:.{digits}f}-{interval[1] * 1e3:.{digits}f}"
