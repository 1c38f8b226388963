"""The min cut and the MILP agree on the paper models' graphs with a modeled profile."""
import pytest

from hsdag_core.coarsening import build_graph
from hsdag_core.device_profile import Profile, add_modeled_device, cost_graph
from policies.solvers.exact import solve


@pytest.mark.parametrize("model", ["resnet50", "inception_v3", "bert_base"])
def test_mincut_equals_milp_on_paper_models(model):
    _, fine, coarse, _ = build_graph(model, "colocation")
    prof = Profile(model, {}, {})
    add_modeled_device(prof, fine, "CPU_MODEL")
    add_modeled_device(prof, fine, "GPU_MODEL")
    prof.boundary_s = 2e-4
    for graph in (fine, coarse):
        cg = cost_graph(graph, prof)
        cut = solve(cg, "sequential", "mincut")
        milp = solve(cg, "sequential", "milp", time_limit=120)
        assert cut.optimal and milp.optimal, (cut.status, milp.status)
        assert cut.value == pytest.approx(milp.value, rel=1e-6)
        assert cut.value <= solve(cg, "sequential", "single").value * (1 + 1e-12)
