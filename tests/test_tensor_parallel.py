"""Tensor parallelism (issue 50): `snf.parallelize` on generated models, under torchrun with gloo on CPU
(docs/training.md, "Tensor parallelism": these tests run its examples' steps).

One launch of 4 processes (tests/tensor_parallel_worker.py, about 30 s on a 2-core CPU: a launch's
start-up is about 10 s, so there is one) runs every model's checks at tp = 2 (logits, each rank's
caches (its heads of the whole model's KV caches and recurrent states, its part of each piece of a
convolution's state), greedy `generate`, gathered gradients, the parameter bytes a rank holds), then FSDP2 x tensor-parallel training on a 2 x 2 ("dp", "tp") mesh. Tolerance 1e-5 fp32: the sharded matmuls sum the same products in
another order (an all-reduce of per-rank partial sums), so they differ by rounding (about 1e-7).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import snf
from snf.parallel import ShardingError, requirement_errors

ROOT = Path(__file__).resolve().parent.parent
WORKER = ROOT / "tests" / "tensor_parallel_worker.py"


@pytest.fixture(scope="module")
def launched(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("tp") / "results.json"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "4",
                           str(WORKER), str(out)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(out.read_text())


@pytest.mark.slow  # the launch: about 30 s on a 2-core CPU
def test_two_ranks_match_one_process(launched):
    results = {name: res for name, res in launched.items() if name not in ("fsdp2_tp", "from_pretrained")}
    assert set(results) == {"llama3", "llama3_tied", "llama3_odd_vocab", "qwen3", "mixtral", "phi3", "gpt_oss",
                            "mamba2", "qwen3_next"}
    for name, res in results.items():
        assert "error" not in res, (name, res)
        assert max(res["logits"], res["caches"], res["grads"]) <= 1e-5, (name, res)
        assert res["params"] == 0 and res["params_back"] == 0, (name, res)  # whole_tensor and sharded_like
        assert res["generate_same"], name
        local, bound, whole = res["bytes"]
        assert local <= bound < whole, (name, res["bytes"])
    assert results["llama3"]["compiled_generate_same"]  # generate's decode step compiled, as by default


@pytest.mark.slow  # the same launch
def test_from_pretrained_with_a_device_mesh_loads_sharded(launched):
    res = launched["from_pretrained"]
    assert "error" not in res, res
    assert res["sharded"] and res["logits"] <= 1e-5, res


@pytest.mark.slow  # the same launch
def test_fsdp2_over_dp_and_tensor_parallel_over_tp_train_as_one_process(launched):
    """A ("dp", "tp") mesh of 2 x 2: 3 AdamW steps with clipping (snf.parallel.clip_grad_norm_: torch's
    cannot stack the norms of DTensors on two meshes) give one process's losses and parameters, and
    the gathered state dict loads into a plain model."""
    res = launched["fsdp2_tp"]
    assert "error" not in res, res
    assert res["loss_values"][-1] < res["loss_values"][0]  # it trains
    assert max(res["losses"], res["params"], res["loaded_logits"]) <= 1e-5, res


def test_a_tp_the_plan_cannot_take_is_refused_before_anything_is_sharded():
    import generated.llama3 as mod

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
    with pytest.raises(ShardingError, match=r"'width_norm' is not supported yet"):
        snf.parallelize(model, Mesh(), plan={"layers.*.attn_norm": "width_norm"})
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    assert type(model.layers[0].k.weight) is torch.nn.Parameter  # nothing sharded
    assert mod.Model.tp_local == ("mlp_hidden", "n_head", "n_kv_head")  # the plan's, which forward reads divided

    # a projection the spec slices into pieces with no tp_pieces entry (SnowflakeCore's qkv: pieces of
    # n_embd, which its forward reads whole elsewhere): a contiguous block of rows per rank would hand
    # rank 0 q's rows and rank 1 k's and v's, wrong logits with no error; refused by name
    import generated.phi3 as phi3
    import generated.snowflake_core as snowflake
    import generated.mamba2 as mamba2
    from specs_table import ROWS
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
