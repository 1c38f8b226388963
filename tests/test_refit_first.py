"""The profile refit's first proposals (``--method refit``): the refitted profile's optimum
first, then, once it is measured, the posterior sample of most expected improvement."""
from __future__ import annotations

import numpy as np
import pytest

from envs.simulator import Simulator
from policies.search.refit import ProfileThompson, expected_improvement
from tests.test_refit import exact, wrong_profile


def test_expected_improvement_prefers_promise_then_uncertainty():
    assert expected_improvement(1.0, 0.0, 2.0) == pytest.approx(1.0)  # sure and better
    assert expected_improvement(3.0, 0.0, 2.0) == 0.0  # sure and worse
    # equally far off the best on average: the less known may beat it by more
    assert expected_improvement(2.5, 1.0, 2.0) > expected_improvement(2.5, 0.1, 2.0)
    assert expected_improvement(1.5, 0.1, 2.0) > expected_improvement(2.5, 1.0, 2.0)


def test_first_proposals_are_the_refitted_optimum_then_new_promising_samples():
    truth, known = wrong_profile(False)
    machine = Simulator(truth)
    search = ProfileThompson(40, 2, 10, seed=0, costs=known)
    measured: list[bytes] = []
    for k in range(10):
        mean_p = exact(search.model.refitted(search.model.posterior_mean()))
        p = search.propose()
        if k == 0:  # nothing measured yet: the profile's own optimum
            np.testing.assert_array_equal(p, exact(known))
        if mean_p.tobytes() not in measured:  # the refitted profile's optimum when it is new
            np.testing.assert_array_equal(p, mean_p)
        assert p.tobytes() not in measured  # never a repeat
        if k > 0 and mean_p.tobytes() in measured:
            # a sample is measured only where the model expects it may beat the best
            best = min(search.latencies)
            assert expected_improvement(*search.model.predict(p), best) > 0
        measured.append(p.tobytes())
        search.observe(p, machine.sequential(p).value)
    assert search.proposals["mean"] >= 1 and search.proposals["sample"] >= 1

