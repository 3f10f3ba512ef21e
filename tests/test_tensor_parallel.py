"""Tensor parallelism (issue 50): `snf.parallelize` on generated models, under torchrun with gloo on CPU
(docs/training.md, "Tensor parallelism": these tests run its examples' steps).

One launch of 4 processes (tests/tensor_parallel_worker.py, about 30 s on a 2-core CPU: a launch's
start-up is about 10 s, so there is one) runs every model's checks at tp = 2 (logits, each rank's
caches (its heads of the whole model's KV caches and recurrent states, its part of each piece of a
convolution's state), greedy `generate`, gathered gradients, the parameter bytes a rank holds), then FSDP2 x tensor-parallel training on a 2 x 2 ("dp", "tp") mesh. Tolerance 1e-5 fp32: the sharded matmuls sum the same products in
another order (an all-reduce of per-rank partial sums), so they differ by rounding (about 1e-7).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import snf
from snf.parallel import ShardingError, requirement_errors

from conftest import once_per_run

ROOT = Path(__file__).resolve().parent.parent
WORKER = ROOT / "tests" / "tensor_parallel_worker.py"


def _launch(folder: Path) -> None:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "4",
                           str(WORKER), str(folder / "results.json")], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]


@pytest.fixture(scope="module")
def launched(tmp_path_factory) -> dict:
    """The one launch's results, shared by the tests below on whichever workers run them."""
    return json.loads((once_per_run(tmp_path_factory, "tp-launch", _launch) / "results.json").read_text())


@pytest.mark.slow  # the launch: about 25 s on a quiet 2-core CPU
def test_two_ranks_match_one_process(launched):
    results = {name: res for name, res in launched.items() if name not in ("fsdp2_tp", "from_pretrained")}
    assert set(results) == {"llama3", "llama3_tied", "llama3_odd_vocab", "qwen3", "mixtral", "phi3", "gpt_oss",
                            "olmo2", "llama3_sp", "llama3_tied_sp", "mamba2", "qwen3_next", "gpt_decoder",
                            "gpt_decoder_sp"}
    for name, res in results.items():
        assert "error" not in res, (name, res)
        assert max(res["logits"], res["caches"], res["grads"]) <= 1e-5, (name, res)
        assert res["params"] == 0 and res["params_back"] == 0, (name, res)  # whole_tensor and sharded_like
        # sequence parallel: generate refused by name (a decode step's one position does not split)
        assert res["generate_refused"] if name.endswith("_sp") else res["generate_same"], name
        local, bound, whole = res["bytes"]
        assert local <= bound < whole, (name, res["bytes"])
    assert results["llama3"]["compiled_generate_same"]  # generate's decode step compiled, as by default
    # a bfloat16 cast of the sharded model: its row-wise partial sums are added in another order than one
    # process's matmul, which bfloat16's 8-bit mantissa shows (measured 8e-3 of the largest logit)
    assert results["llama3"]["bf16_logits"] <= 2e-2, results["llama3"]


@pytest.mark.slow  # the same launch
def test_from_pretrained_with_a_device_mesh_reads_a_slice_and_saves_whole(launched):
    """llama3 (an uneven vocabulary), phi3 (pieces) and gpt-oss (experts read through `.T` and
    interleaved keys, sinks) loaded with a mesh: every rank's shards are those of snf.parallelize of a
    plain load, bit for bit, and each rank read at most the bytes it holds of the files (a rank that
    read the whole tensors fails this); saved from tp = 2, the folder is the whole model's save, file
    for file; a save that fails while writing raises on every rank and leaves the folder loadable."""
    res = launched["from_pretrained"]
    assert "error" not in res, res
    assert res["sharded"] and res["shards_equal"] and res["logits"] <= 1e-5, res
    assert res["read_at_most_held"], res["bytes"]
    for read, held, whole in res["bytes"].values():  # rank 0's
        assert read <= held < whole, res["bytes"]
    assert res["saved_same"] and res["saved_logits"] <= 1e-5 and res["failed_save_kept"], res


@pytest.mark.slow  # the same launch
def test_fsdp2_over_dp_and_tensor_parallel_over_tp_train_as_one_process(launched):
    """A ("dp", "tp") mesh of 2 x 2: 3 AdamW steps with clipping (snf.parallel.clip_grad_norm_: torch's
    cannot stack the norms of DTensors on two meshes) give one process's losses and parameters, and
    the gathered state dict loads into a plain model; saved with save_pretrained and loaded back onto
    the mesh with from_pretrained(device_mesh=), it gives the same logits."""
    res = launched["fsdp2_tp"]
    assert "error" not in res, res
    assert res["loss_values"][-1] < res["loss_values"][0]  # it trains
    assert max(res["losses"], res["params"], res["loaded_logits"], res["reloaded_logits"]) <= 1e-5, res


def test_a_tp_the_plan_cannot_take_is_refused_before_anything_is_sharded():
    import generated.llama3 as mod
    from specs_table import ROWS

    cfg = mod.Config(vocab_size=16, block_size=8, n_layer=1, n_head=4, n_kv_head=2, n_embd=16, mlp_hidden=8)
    assert requirement_errors(mod.Model, cfg, 2) == []
    assert requirement_errors(mod.Model, cfg, 4) == [
        "tensor parallel over 4 ranks: tp must divide KVH = n_kv_head, the heads `reshape` makes of sharded "
        "features (llama3.snf:72)"]

    class Mesh:  # what parallelize reads of a DeviceMesh before it shards anything
        ndim, mesh_dim_names = 1, ("tp",)

        def size(self):
            return 4

    model = mod.Model(cfg)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ShardingError, match=r"tp must divide KVH = n_kv_head.*llama3.snf:72"):
        snf.parallelize(model, Mesh())
    Mesh.size = lambda self: 2  # a tp the config takes, and a plan naming nothing the model has
    with pytest.raises(ShardingError, match=r"layers.\*.qkv \(colwise\): no module or parameter"):
        snf.parallelize(model, Mesh(), plan={"layers.*.qkv": "colwise"})
    with pytest.raises(ShardingError, match=r"layers.\*.q \(width_norm\): a norm over a sharded width must be an "
                                             r"nn.RMSNorm or nn.LayerNorm, not Linear"):
        snf.parallelize(model, Mesh(), plan={"layers.*.q": "width_norm"})
    import generated.mixtral as mixtral  # experts on whole tokens: no sequence parallel, by the plan's reason
    with pytest.raises(ShardingError, match=r"cannot split its sequences over the tp ranks: `linear` of "
                                             r"`router_weight` \(replicate\) reads the stream split by positions "
                                             r"\(mixtral.snf:80\)"):
        snf.parallelize(mixtral.Model(**ROWS["mixtral"].small), Mesh(), sequence_parallel=True)
    # an expert weight's axis is its role's (Model.tp_expert_axes), never guessed from its name
    with pytest.raises(ShardingError, match=r"layers.\*.up.weight \(experts\): the model has no tp_expert_axes"):
        snf.parallelize(model, Mesh(), plan={"layers.*.up.weight": "experts"})
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    assert type(model.layers[0].k.weight) is torch.nn.Parameter  # nothing sharded
    assert mod.Model.tp_local == ("mlp_hidden", "n_head", "n_kv_head")  # the plan's, which forward reads divided

    # a projection the spec slices into pieces with no tp_pieces entry (SnowflakeCore's qkv: pieces of
    # n_embd, which its forward reads whole elsewhere): a contiguous block of rows per rank would hand
    # rank 0 q's rows and rank 1 k's and v's, wrong logits with no error; refused by name
    import generated.phi3 as phi3
    import generated.snowflake_core as snowflake
    import generated.mamba2 as mamba2
    c = phi3.Config(**ROWS["phi3"].small)
    assert phi3.Model.tp_plan["layers.*.qkv"] == "colwise_pieces"
    assert {k: f(c) for k, f in phi3.Model.tp_pieces.items()} == {  # the rows' order: q, k, v; gate, up
        "layers.*.qkv": (c.q_dim, c.kv_dim, c.kv_dim), "layers.*.gate_up": (c.mlp_hidden, c.mlp_hidden)}
    assert {"q_dim", "kv_dim"} <= set(phi3.Model.tp_local)  # the forward slices by them: divided
    # no table: pieces of a size read whole elsewhere (n_embd)
    assert not hasattr(snowflake.Model, "tp_pieces")
    # pieces of pieces flattened (Mamba2's z, xbc, dt, then x, B, C of xbc), and the conv weight's and
    # state's pieces; the forward's slices read a rank's d_inner, conv_dim, proj_dim
    c = mamba2.Config(**ROWS["mamba2"].small)
    x, bc = c.d_inner, c.n_groups * c.state_size
    assert {k: f(c) for k, f in mamba2.Model.tp_pieces.items()} == {
        "layers.*.in_proj": (x, x, bc, bc, c.n_head), "layers.*.conv_weight": (x, bc, bc),
        "layers.*.conv_bias": (x, bc, bc), "new_conv": (x, bc, bc)}
    assert {"d_inner", "conv_dim", "proj_dim"} <= set(mamba2.Model.tp_local)
    small = snowflake.Model(**ROWS["snowflake_core"].small)
    with pytest.raises(ShardingError, match=r"layers.\*.qkv: style 'colwise_pieces' is not supported here: the "
                                             r"model has no tp_pieces entry"):
        snf.parallelize(small, Mesh())
    # Nemotron-H's linears are plain parameters (F.linear of a layer type's weights), which torch's module
    # styles cannot shard: refused by name, not a shape error mid-forward
    import generated.nemotron_h as nemotron_h
    with pytest.raises(ShardingError, match=r"layers.\*.in_proj_weight \(colwise\): a plain parameter"):
        snf.parallelize(nemotron_h.Model(**ROWS["nemotron_h"].small), Mesh())


def test_clip_grad_norm_is_torchs_with_no_host_sync(monkeypatch):
    """snf.parallel.clip_grad_norm_ gives torch's norm and scaled gradients, bit for bit (clipped, and
    within the bound), and reads nothing back to the host (the scale stays a tensor on the device)."""
    from snf.parallel import clip_grad_norm_
    torch.manual_seed(0)
    for max_norm in (1.0, 1e3):
        ours = [torch.nn.Parameter(torch.randn(5, 3)) for _ in range(3)] + [torch.nn.Parameter(torch.randn(4))]
        theirs = [torch.nn.Parameter(p.detach().clone()) for p in ours]
        for p, q in zip(ours, theirs):
            p.grad = 3 * torch.randn_like(p)
            q.grad = p.grad.clone()
        want = torch.nn.utils.clip_grad_norm_(theirs, max_norm)
        with monkeypatch.context() as m:
            for sync in ("item", "__float__", "tolist", "__bool__"):
                m.setattr(torch.Tensor, sync, lambda *a: pytest.fail("a host sync"))
            got = clip_grad_norm_(ours, max_norm)
        assert torch.equal(got, want) and all(torch.equal(p.grad, q.grad) for p, q in zip(ours, theirs))


def test_sharded_sinks_and_experts_on_one_rank_keep_the_model_a_plain_one(tmp_path, monkeypatch):
    """gpt-oss's sinks (shard:K) and experts (by their role's axis) sharded on a 1-rank mesh, in this
    process: the block keeps its class (type, pickling), the state dict its keys, the logits and every
    gradient are the whole model's; and a sharded experts call imports nothing once the first has
    (what a call can decide once, snf.runtime.experts decides once)."""
    import builtins
    import copy

    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    import generated.gpt_oss as mod
    from snf.parallel import _shard_along, _shard_experts, clip_grad_norm_
    from specs_table import ROWS
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    try:
        mesh = init_device_mesh("cpu", (1,))
        torch.manual_seed(0)
        whole = mod.Model(mod.Config(**ROWS["gpt_oss"].small))
        model = copy.deepcopy(whole)
        _shard_along(model, mesh, {"layers.*.sinks": 0}, {})
        _shard_experts(model, mesh, mod.Model.tp_expert_axes)
        assert type(model.layers[0]) is mod.Block and list(model.state_dict()) == list(whole.state_dict())
        assert model.layers[0].down_weight.placements[0].dim == 2 and model.layers[0].down_bias.dim() == 2
        idx = torch.randint(0, mod.Config(**ROWS["gpt_oss"].small).vocab_size, (2, 5))
        model(idx)  # the first sharded call imports what the later ones use
        imported = []
        real = builtins.__import__

        def spy(name, globals=None, *args, **kwargs):
            if (globals or {}).get("__name__", "").startswith("snf"):
                imported.append(name)
            return real(name, globals, *args, **kwargs)
        with monkeypatch.context() as m:
            m.setattr(builtins, "__import__", spy)
            out = model(idx).logits
        assert imported == []
        ref = whole(idx).logits
        assert torch.equal(out, ref)
        out.square().sum().backward()
        ref.square().sum().backward()
        grads = dict(whole.named_parameters())
        for name, p in model.named_parameters():
            g = p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad
            assert torch.allclose(g, grads[name].grad, atol=1e-6), name
        # clipping DTensor gradients alone (FSDP2 makes every one a DTensor): torch's on the whole ones
        sharded = {n: p for n, p in model.named_parameters() if hasattr(p, "full_tensor")}
        assert torch.allclose(clip_grad_norm_(sharded.values(), 1e-3),
                              torch.nn.utils.clip_grad_norm_([grads[n] for n in sharded], 1e-3))
        assert all(torch.allclose(p.grad.full_tensor(), grads[n].grad, atol=1e-9) for n, p in sharded.items())
        assert "sinks" not in vars(model.layers[0])  # the local view lives for a forward only
        loaded = torch.load(io.BytesIO(_saved(model)), weights_only=False)  # pickles as a plain model
        assert type(loaded.layers[0]) is mod.Block
    finally:
        dist.destroy_process_group()


def _saved(model) -> bytes:
    buffer = io.BytesIO()
    torch.save(model, buffer)
    return buffer.getvalue()


def test_a_head_always_tied_to_its_table_keeps_the_table_whole():
    """nanoGPT's and the GPT decoder's LM head is always the token embedding (`linear(x, weight=wte)`,
    no lm_head): the plan keeps the table whole (sharded, it handed the head a DTensor table beside plain
    activations: "mixed torch.Tensor and DTensor"), and sequence parallelism gathers the final norm's
    output before the head. The launch runs gpt_decoder so at tp = 2, with and without sequence
    parallelism (test_two_ranks_match_one_process)."""
    import generated.gpt_decoder as gpt_decoder
    import generated.nanogpt as nanogpt
    for mod in (nanogpt, gpt_decoder):
        assert "token_embedding" not in mod.Model.tp_plan and "vocab_head" not in mod.Model.tp_plan.values()
    assert gpt_decoder.Model.tp_sequence["norm"] == "sequence_norm_head"
