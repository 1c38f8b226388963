"""Backends are classes behind one declared interface, registered once by name."""
import numpy as np
import pytest

from envs.backends import BACKENDS, BackendKind, graph_source, is_real, register
from envs.base import Backend, Measurement
from envs.graph_backend import make_backend
from hsdag_ray.run.config import TrainConfig


class HalfSimulator(Backend):
    """A backend made for this test: the simulator's latency halved."""

    def __init__(self, graph, **kwargs):
        from envs.graph_backend import simulator_backend

        self.inner = simulator_backend(graph, **kwargs)
        self.devices, self.name = self.inner.devices, "half"

    def measure(self, placement, race=False):
        return self.measure_array(self.inner.sim.graph.placement_from_names(placement))

    def measure_array(self, placement, race=False):
        m = self.inner.measure_array(placement)
        return Measurement(ok=m.ok, latency_s=m.latency_s / 2, backend=self.name)


def half_backend(graph, **kwargs):
    return HalfSimulator(graph, **kwargs)


def test_the_registry_is_the_one_list_of_backends():
    from hsdag_ray.apply import modes

    assert set(BACKENDS) == {"auto", "hetero", "pipeline", "simulator", "torch"}
    assert graph_source("torch").name == "torch" and graph_source("auto").name == "openvino"
    assert graph_source("simulator", "torch").name == "torch"
    assert graph_source("simulator").name == "openvino"
    assert graph_source("simulator", "doppler").name == "openvino"  # a source no backend has
    assert [n for n in BACKENDS if is_real(n)] == list(modes())
    assert not is_real("simulator")
    with pytest.raises(ValueError, match="registered twice"):
        register(BackendKind("simulator", "x:y", False, ""))
    with pytest.raises(Exception, match="unknown backend 'nope'"):
        TrainConfig.of(backend="nope").validate()


def test_a_new_backend_is_its_class_and_one_registration(tiny_graph_and_profile):
    graph, profile = tiny_graph_and_profile
    register(BackendKind("half", f"{__name__}:half_backend", False, "the simulator, halved"))
    try:
        TrainConfig.of(backend="half").validate()  # the command line accepts it
        half = make_backend("half", graph, profile=profile)
        sim = make_backend("simulator", graph, profile=profile)
        p = np.zeros(graph.num_nodes, dtype=np.int64)
        assert half.measure_array(p).latency_s == pytest.approx(sim.measure_array(p).latency_s / 2)
        assert sim.simulated and not sim.races and not half.simulated
    finally:
        del BACKENDS["half"]


def test_a_backend_missing_part_of_the_interface_cannot_be_made():
    class Incomplete(Backend):
        def measure(self, placement, race=False):
            return Measurement(ok=False)

    with pytest.raises(TypeError, match="measure_array"):
        Incomplete()


@pytest.fixture
def tiny_graph_and_profile():
    from conftest import modeled_profile
    from hsdag_core.coarsening import build_graph

    _, _, graph, _ = build_graph("tiny_cnn", "colocation")
    return graph, modeled_profile("tiny_cnn")


def test_a_backend_kind_carries_its_devices():
    """Default devices, checking and describing devices, and whether a cost model gives
    the latency are declared by the kind; the commands read them from it."""
    from hsdag_ray.cli import UsageError, resolve_devices
    from hsdag_ray.run.resolve import default_devices

    assert BACKENDS["simulator"].simulated and not BACKENDS["torch"].simulated
    for name, kind in BACKENDS.items():
        if not kind.real:
            assert kind.default_devices == ()
            continue
        assert default_devices(name) == list(kind.default_devices) and len(kind.default_devices) == 2
        # both default devices exist on any machine with a CPU
        assert resolve_devices(kind.default_devices, 1, name) == list(kind.default_devices)
        assert len(kind.describe_devices(list(kind.default_devices), 1)) == 2
    assert resolve_devices(["cuda:3"], 1, "torch", here=False) == ["cuda:3"]  # read, not looked for
    with pytest.raises(UsageError):
        resolve_devices(["NO_SUCH_DEVICE"], 1, "auto")
