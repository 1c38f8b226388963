"""The profile refit's first proposals (``--method refit``): the refitted profile's optimum
first, then, once it is measured, the posterior sample of most expected improvement."""
from __future__ import annotations

import dataclasses

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



def test_a_single_device_teaches_the_shared_scale_of_its_times():
    """A machine whose third device is uniformly 1.6x slower than the profile says: with a
    shared factor per device in the prior, measuring that device alone scales all its
    nodes' times alike, where the independent prior puts most of the correction on the
    nodes of the largest times (its variance is proportional to their squares)."""
    from envs.latency_model import LatencyModel
    from hsdag_core.synthetic import random_cost_graph

    known = random_cost_graph(30, devices=3, seed=4)
    truth = dataclasses.replace(known, compute_s=known.compute_s * np.array([1.0, 1.0, 1.6]))
    machine = Simulator(truth)
    ratios = {}
    for scale in (0.0, 0.5):
        model = LatencyModel(known, device_scale=scale)
        for d in range(3):
            p = np.full(30, d)
            model.add(p, machine.sequential(p).value)
        ratios[scale] = model.refitted(model.posterior_mean()).compute_s[:, 2] / known.compute_s[:, 2]
    assert np.allclose(ratios[0.5], 1.6, rtol=0.1)  # every node's time scaled about alike
    assert np.std(ratios[0.5]) < 0.25 * np.std(ratios[0.0])
    search = ProfileThompson(30, 3, 10, costs=known, device_scale=0.5)
    assert search.model.scaled and not ProfileThompson(30, 3, 10, costs=known).model.scaled
