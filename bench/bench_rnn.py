"""What the RNN placer costs on long graphs: time and memory per graph size.

    python bench/bench_rnn.py                          # 50 .. 800 ops, batch 20
    python bench/bench_rnn.py --sizes 100,300 --groups 32

For chains with skip connections of ``n`` ops (the shape of a deep network's
graph), prints the time to sample one placement (what an EnvRunner does per
step), the time of one learner update's forward and backward pass over a
batch of ``--batch`` placements (teacher forcing), and the bytes of the
activations that pass keeps for the backward (every tensor autograd saves,
counted once). Per decoder step the pass keeps the LSTM and attention
activations of the batch (``O(B * H)``) and the attention weights (``O(B * n)``):
``O(B * n * (H + n))`` in all, about linear in ``n`` while ``n`` is below a few
``H``. With the grouper (``--groups G``) the decoder runs over at most ``G``
steps whatever ``n``.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch


def saved_bytes(fn) -> tuple[object, int]:
    """Runs ``fn`` and counts the bytes of the tensors autograd saves for backward."""
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor):
        key = t.untyped_storage().data_ptr()
        seen[key] = max(seen.get(key, 0), t.untyped_storage().nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return out, sum(seen.values())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="50,100,200,400,800")
    ap.add_argument("--batch", type=int, default=20)
    ap.add_argument("--groups", type=int, default=0, help="0: place every op; G: the learned grouper")
    ap.add_argument("--hidden", type=int, default=64)
    args = ap.parse_args()
    torch.set_num_threads(1)
    from ray.rllib.core.columns import Columns

    from envs.observation import pad_graph_observation, placement_spaces
    from policies.rnn.module import RNNPlacerRLModule

    print(f"| ops | sample one placement (s) | update over {args.batch} (s) | saved for backward (MB) |")
    print("|---|---|---|---|")
    for n in [int(s) for s in args.sizes.split(",")]:
        rng = np.random.default_rng(0)
        src = np.concatenate([np.arange(n - 1), np.arange(0, n - 4, 3)])
        dst = np.concatenate([np.arange(1, n), np.arange(4, n, 3)])
        x = rng.normal(size=(n, 16))
        obs_space, act_space = placement_spaces(n, len(src), 16, 2)
        m = RNNPlacerRLModule(observation_space=obs_space, action_space=act_space,
                              model_config={"hidden_dim": args.hidden, "grouper": args.groups > 0,
                                            "num_groups": max(1, args.groups)})
        one = pad_graph_observation(x, np.stack([src, dst]), n, len(src))
        obs1 = {k: torch.as_tensor(v)[None] for k, v in one.items()}
        t0 = time.perf_counter()
        with torch.no_grad():
            out = m.forward_exploration({Columns.OBS: obs1})
        t_sample = time.perf_counter() - t0
        obs = {k: v.repeat(args.batch, *([1] * (v.dim() - 1))) for k, v in obs1.items()}
        batch = {Columns.OBS: obs, Columns.ACTIONS: out[Columns.ACTIONS].repeat(args.batch, 1),
                 Columns.ACTION_DIST_INPUTS: out[Columns.ACTION_DIST_INPUTS].repeat(args.batch, 1)}
        t0 = time.perf_counter()
        fwd, nbytes = saved_bytes(lambda: m.forward_train(batch))
        dist = m.get_train_action_dist_cls().from_logits(fwd[Columns.ACTION_DIST_INPUTS])
        dist.logp(batch[Columns.ACTIONS]).sum().backward()
        t_update = time.perf_counter() - t0
        print(f"| {n} | {t_sample:.3f} | {t_update:.2f} | {nbytes / 1e6:.1f} |", flush=True)


if __name__ == "__main__":
    main()
