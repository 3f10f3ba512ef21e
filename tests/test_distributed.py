"""Distributed training of generated models on torch.distributed: DDP and FSDP2 (`fully_shard`,
one unit per Block, then the root), 2 processes on this machine with the gloo backend on CPU.

Each run trains a few AdamW steps on a global batch split between the ranks, and must give the
losses, gradients and parameters of single-process training on the whole batch. Tolerance 1e-5:
both compute the same float32 sums, only in another order (two per-rank means averaged by an
all-reduce, against one mean), so they differ by rounding: about 1e-7 in losses and gradients.
The parameters are the touchiest: Adam's update lr * g / (|g| + eps) moves by up to lr * d / eps
for a rounding difference d in g. At the default eps of 1e-8 a gradient of 2e-8 (an element of
nanogpt's layers.1.mlp_proj.weight at step 1) that differs by 3e-10 between the two orders moves
the parameters 1.05e-5 apart after 3 steps (here and in CI): AdamW's eps is 1e-6 here, which bounds
that move by about 1e-9 a step (measured: 8e-7 at most over all parameters).
"""

from __future__ import annotations

import importlib
import os
import time
import warnings

import pytest
import torch
import torch.nn.functional as F

from conftest import once_per_run

pytestmark = pytest.mark.slow  # two processes: about 20 s on a 2-core CPU

WORLD = 2
STEPS = 3
MODELS = {
    # an odd vocabulary (29 rows) makes FSDP2 shard unevenly
    "nanogpt": dict(vocab_size=29, block_size=16, n_layer=2, n_head=2, n_embd=16),
    "gpt_decoder": dict(vocab_size=29, block_size=16, n_layer=2, n_head=2, n_embd=16, mlp_hidden=24,
                        gradient_checkpointing=True),
}
WRAPPERS = ("ddp", "fsdp2")


def make_model(name: str) -> torch.nn.Module:
    mod = importlib.import_module(f"generated.{name}")
    torch.manual_seed(0)  # the same initial weights in every process
    return mod.Model(mod.Config(**MODELS[name])).train()


def batches() -> list:
    """The global batch of each step: the same 4 sequences of 9 tokens (inputs 8, shifted targets 8),
    so the loss falls within a few steps."""
    tokens = torch.randint(0, 29, (2 * WORLD, 9), generator=torch.Generator().manual_seed(1))
    return [tokens] * STEPS


def loss_of(model, name: str, tokens: torch.Tensor) -> torch.Tensor:
    if name == "gpt_decoder":  # the spec's own shifted loss
        return model(tokens, labels=tokens).loss
    logits = model(tokens[:, :-1]).logits
    return F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())


def optimizer(model: torch.nn.Module) -> torch.optim.Optimizer:
    """AdamW with weight decay on matrices and embeddings only (docs/training.md)."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=3e-3, eps=1e-6)  # eps: see the module's docstring


def full(t: torch.Tensor) -> torch.Tensor:
    """A whole tensor: an FSDP2 shard (a DTensor) gathered from every rank."""
    return (t.full_tensor() if hasattr(t, "full_tensor") else t).detach().clone()


def train(model, name: str, rank: int = 0, world: int = 1, wrapped=None) -> dict:
    """STEPS optimizer steps, each on this rank's share of the global batch; the global loss,
    every parameter's gradient and the final parameters, by name."""
    wrapped = wrapped or model
    opt = optimizer(model)
    losses, grads = [], []
    for tokens in batches():
        share = tokens.chunk(world)[rank]
        loss = loss_of(wrapped, name, share)
        loss.backward()
        grads.append({n: full(p.grad) for n, p in model.named_parameters()})
        opt.step()
        opt.zero_grad(set_to_none=True)
        total = loss.detach().clone()
        if world > 1:
            torch.distributed.all_reduce(total)  # gloo has no AVG: sum, then divide
        losses.append(total.item() / world)
    return {"losses": losses, "grads": grads, "params": {n: full(p) for n, p in model.named_parameters()}}


def gathered_state_dict(model) -> dict:
    """The whole state dict of an FSDP2 model, gathered to rank 0 as docs/training.md does it (a
    collective: every rank calls it); or the error, so that the other runs go on."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    try:
        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return {"state_dict": get_model_state_dict(model, options=options)}
    except Exception as err:
        return {"state_dict_error": f"{type(err).__name__}: {err}"}


def worker(rank: int, init_file: str, out_dir: str) -> None:
    """One rank: every model, under DDP and under FSDP2, each from the same initial weights."""
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", message=".*returned a view tensor.*")  # FSDP2's note on in-place ops
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    try:
        for name in MODELS:
            for wrapper in WRAPPERS:
                model = make_model(name)
                if wrapper == "ddp":
                    result = train(model, name, rank, WORLD, DistributedDataParallel(model))
                else:
                    for block in model.layers:
                        fully_shard(block)
                    fully_shard(model)
                    result = train(model, name, rank, WORLD)
                    result.update(gathered_state_dict(model))
                torch.save(result, os.path.join(out_dir, f"{name}-{wrapper}-{rank}.pt"))
                dist.barrier()
    finally:
        dist.destroy_process_group()


def _spawn(out) -> None:
    import torch.multiprocessing as mp

    context = mp.spawn(worker, args=(str(out / "init"), str(out)), nprocs=WORLD, join=False)
    deadline = time.monotonic() + 300
    while not context.join(timeout=5):
        if time.monotonic() > deadline:
            for process in context.processes:
                process.kill()
            pytest.fail("the distributed workers did not finish in 300 s")


@pytest.fixture(scope="module")
def distributed_results(tmp_path_factory) -> dict:
    """Run every (model, wrapper) pair across 2 processes once; their results by (model, wrapper, rank)."""
    out = once_per_run(tmp_path_factory, "distributed", _spawn)
    return {(name, wrapper, rank): torch.load(out / f"{name}-{wrapper}-{rank}.pt")
            for name in MODELS for wrapper in WRAPPERS for rank in range(WORLD)}


@pytest.fixture(scope="module")
def single_process() -> dict:
    return {name: train(make_model(name), name) for name in MODELS}


def max_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max((a[k] - b[k]).abs().max().item() for k in a)


@pytest.mark.parametrize("wrapper", WRAPPERS)
@pytest.mark.parametrize("name", sorted(MODELS))
def test_distributed_training_equals_single_process(distributed_results, single_process, name, wrapper):
    want = single_process[name]
    assert want["losses"][-1] < want["losses"][0] - 0.05  # it trains: a comparison that can fail
    for rank in range(WORLD):
        got = distributed_results[(name, wrapper, rank)]
        assert len(got["losses"]) == STEPS
        assert max(abs(a - b) for a, b in zip(got["losses"], want["losses"])) <= 1e-5, (got["losses"], want["losses"])
        for step in range(STEPS):
            assert max_diff(got["grads"][step], want["grads"][step]) <= 1e-5, step
        assert max_diff(got["params"], want["params"]) <= 1e-5


@pytest.mark.parametrize("name", sorted(MODELS))
def test_fsdp2_state_dict_gathers_and_loads(distributed_results, single_process, name):
    from snf.interop import load_state_dict
    got = distributed_results[(name, "fsdp2", 0)]
    assert "state_dict_error" not in got, got["state_dict_error"]
    model = load_state_dict(make_model(name), got["state_dict"])
    assert max_diff({n: p.detach() for n, p in model.named_parameters()}, single_process[name]["params"]) <= 1e-5
