"""DOPPLER's simulator as its repository writes it (``env/cost.py`` of xinyuyao/Doppler,
``Simulator.get_cost``), on simpy and networkx, without DGL or torch: the independent
implementation the tests compare the project's ``parallel`` objective with.

The graph is built as DGL's ``to_networkx`` builds it (a ``MultiDiGraph``, nodes
``0..n-1``, one edge per file edge in file order), times stay the file's integers, and the
value is divided by 1e10 as DOPPLER does.
"""
from __future__ import annotations

import re
from collections import namedtuple

import networkx as nx
import simpy


def read(path):
    """``(n, sources, destinations, comp, comm)`` as DOPPLER's ``_read_compute_graph`` reads them."""
    data = open(path).readlines()
    inputs = list(map(int, re.findall(r"\d+", data[1])))
    src = list(map(int, re.findall(r"\d+", data[2])))
    dst = list(map(int, re.findall(r"\d+", data[3])))
    n = int(data[0]) - len(inputs)
    info = [list(map(int, re.findall(r"\d+", data[4 + i]))) for i in range(n)]
    return n, src, dst, [r[0] for r in info], [r[1] for r in info]


def get_cost(path, dev_assign):
    """DOPPLER's ``Simulator.get_cost`` of the placement ``dev_assign`` (a device per op)."""
    n, src, dst, comp_cost, comm_cost = read(path)
    G = nx.MultiDiGraph()
    G.add_nodes_from(range(n))
    for eid, (u, v) in enumerate(zip(src, dst)):
        G.add_edge(u, v, id=eid)
    G = G.to_directed()
    Op = namedtuple("Op", "id inputs outputs comp_time dev")

    def latency(u, d1, d2):
        return 0 if d1 == d2 else comm_cost[u]

    def communicate(env, finish, time):
        yield finish
        yield env.timeout(time)
        return env.now

    def compute(env, op):
        yield simpy.events.AllOf(env, op.inputs.values())
        with op.dev.request() as req:
            yield req
            yield env.timeout(op.comp_time)
        op.outputs.succeed()

    env = simpy.Environment()
    finish_event = {o: env.event() for o in G.nodes}
    comm_events = {}
    for e in G.edges:
        comm_events[e[:2]] = env.process(communicate(
            env, finish_event[e[0]], latency(e[0], dev_assign[e[0]], dev_assign[e[1]])))
    devices = {d: simpy.Resource(env) for d in set(dev_assign)}
    for o in G.nodes:
        inputs = {e: comm_events[e] for e in G.in_edges(o)}
        env.process(compute(env, Op(o, inputs, finish_event[o], comp_cost[o], devices[dev_assign[o]])))
    while env.peek() < float("inf"):
        env.step()
    return env.now / 1e10
