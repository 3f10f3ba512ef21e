"""The tensor-parallel plan derived from a spec (snf/passes/tensor_parallel.py, the registry's sharding
rules) and `snfc check --tp N`: golden plans of every bundled spec at tp=2, llama3's plan against
torchtitan's and transformers' hand-written ones, the refusals. No torch: the plan is the compiler's."""

from __future__ import annotations

import io
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

from snf.cli import main
from snf.ops import all_ops
from snf.passes.show import show_tensor_parallel
from tests.conftest import assert_golden
from tests.specs_table import SPECS, plans

ROOT = Path(__file__).resolve().parents[1]


def _by_param(planned) -> dict[str, str]:
    return {name: p.style for p in planned.tp.placements for name in p.params}


def test_every_op_that_takes_a_tensor_has_a_sharding_rule():
    tensor_kinds = {"tensor", "tensor?", "value", "tensors"}
    missing = [n for n, op in all_ops().items() if op.shard is None and any(p.kind in tensor_kinds for p in op.params)]
    assert missing == []


def test_every_bundled_plan_at_tp_2_is_golden():
    """One golden per spec (tests/golden/tp/<spec>.txt): its placements with their reasons, its caches,
    what tp must divide; and most specs shard fully (the rest say why not in their golden)."""
    assert sorted(SPECS) == sorted(p.stem for p in (ROOT / "specs").glob("*.snf"))
    full = []
    for name in SPECS:
        assert_golden(f"tp/{name}.txt", "\n".join(show_tensor_parallel(plans(name), 2)) + "\n")
        full += [name] if plans(name).tp.full else []
    assert len(full) >= 28, sorted(set(SPECS) - set(full))


def test_llama3_plan_is_torchtitans_and_transformers():
    """transformers' LlamaConfig.base_model_tp_plan and LlamaForCausalLM._tp_plan, and torchtitan's
    llama3 `apply_tp` (tok_embeddings RowwiseParallel(input_layouts=Replicate()), wq/wk/wv and w1/w3
    ColwiseParallel, wo and w2 RowwiseParallel, output ColwiseParallel), written out by their keys in
    the spec's `checkpoint hf:` names."""
    transformers_plan = {
        "layers.*.self_attn.q_proj": "colwise", "layers.*.self_attn.k_proj": "colwise",
        "layers.*.self_attn.v_proj": "colwise", "layers.*.self_attn.o_proj": "rowwise",
        "layers.*.mlp.gate_proj": "colwise", "layers.*.mlp.up_proj": "colwise", "layers.*.mlp.down_proj": "rowwise",
        "lm_head": "colwise_gather_output",
    }
    torchtitan_plan = {"tok_embeddings": "vocab_embedding", "output": "vocab_head"}  # the rest as transformers'
    hf_to_snf = {"layers.*.self_attn.q_proj": "q_weight", "layers.*.self_attn.k_proj": "k_weight",
                 "layers.*.self_attn.v_proj": "v_weight", "layers.*.self_attn.o_proj": "o_weight",
                 "layers.*.mlp.gate_proj": "gate_weight", "layers.*.mlp.up_proj": "up_weight",
                 "layers.*.mlp.down_proj": "down_weight", "lm_head": "lm_head_weight", "tok_embeddings":
                 "token_embedding", "output": "lm_head_weight"}
    llama3 = plans("llama3")
    styles = _by_param(llama3)
    ours = {"colwise_gather_output": "vocab_head"}
    for key, style in {**transformers_plan, **torchtitan_plan}.items():
        assert styles[hf_to_snf[key]] == ours.get(style, style), key
    sharded = {n for n, s in styles.items() if s != "replicate"}
    assert sharded == set(hf_to_snf.values()), sharded  # the norms stay whole, as in both
    assert llama3.tp.full and [(c[0], c[2]) for c in llama3.tp.caches] == [("past_keys", 3), ("past_values", 3)]
    # module for module, torchtitan's and transformers' (q, k, v separate nn.Linears; the head an nn.Linear)
    assert llama3.tp.styles() == {"token_embedding": "vocab_embedding", "layers.*.q": "colwise",
                                 "layers.*.k": "colwise", "layers.*.v": "colwise",
                                 "layers.*.o": "rowwise", "layers.*.gate": "colwise", "layers.*.up": "colwise",
                                 "layers.*.down": "rowwise", "lm_head": "vocab_head"}
    # and with sequence parallelism, torchtitan's (enable_sp): tok_embeddings output Shard(1), attention_norm,
    # ffn_norm and norm SequenceParallel, wq/wk/wv/w1/w3 input Shard(1) (all-gathered), wo/w2 output Shard(1)
    # (reduce-scattered), output input Shard(1)
    roles = {key: role for key, role, _ in llama3.sequence.roles}
    assert llama3.sequence.refused is None and roles == {
        "token_embedding": "scatter", "layers.*.attn_norm": "sequence_norm", "layers.*.q": "gather",
        "layers.*.k": "gather", "layers.*.v": "gather", "layers.*.o": "scatter", "layers.*.mlp_norm": "sequence_norm",
        "layers.*.gate": "gather", "layers.*.up": "gather", "layers.*.down": "scatter",
        "norm": "sequence_norm_head", "lm_head": "gather"}


def test_families_shard_as_their_anchors():
    """DeepSeek-V3's attention by heads (q_b column-wise, kv_b's rows with the heads, o row-wise, the
    low-rank q_a and kv_a whole by design), experts by width with the router whole, Mamba2's projections
    and per-head parameters by heads and groups, Phi-3's fused qkv and gate_up in pieces, OLMo 2's q/k
    norm over the whole width, Qwen3's per-head q/k norm."""
    ds = plans("deepseek_v3")
    s = _by_param(ds)
    assert (s["q_b_weight"], s["kv_b_weight"], s["o_weight"]) == ("colwise", "shard:0", "rowwise")
    assert (s["q_a_weight"], s["kv_a_weight"], s["router_weight"]) == ("replicate",) * 3
    assert s["expert_up"] == s["expert_down"] == "experts" and ds.tp.full
    mamba = plans("mamba2")
    s = _by_param(mamba)
    assert (s["in_proj_weight"], s["out_proj_weight"], s["A_log"], s["conv_weight"]) == (
        "colwise_pieces", "rowwise", "shard:0", "shard:0")
    display = dict(mamba.model.display)
    assert {r.message(display, "m").split(",")[0] for r in mamba.tp.requires} >= {
        "tp must divide H = n_head", "tp must divide G = n_groups"}
    phi3 = plans("phi3")
    qkv = next(p for p in phi3.tp.placements if "qkv_weight" in p.params)
    assert qkv.style == "colwise_pieces" and "pieces at lines 74, 75, 76" in qkv.reason
    assert _by_param(plans("olmo2"))["q_norm_weight"] == "width_norm"
    assert _by_param(plans("qwen3"))["q_norm_weight"] == "head_norm"


def _check(*argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(["check", *argv])
    return code, out.getvalue(), err.getvalue()


def test_check_tp_prints_the_plan_and_refuses_what_cannot_shard():
    code, out, _ = _check("--tp", "2", str(ROOT / "specs" / "llama3.snf"))
    assert code == 0 and "layers.*.q " in out and "colwise" in out
    # 16 ranks cannot hold llama3's 8 key/value heads: refused at the line that makes them
    code, out, _ = _check("--tp", "16", str(ROOT / "specs" / "llama3.snf"))
    assert code == 1
    assert "llama3.snf:72:19: error: tp=16 does not divide KVH = n_kv_head = 8 in the default config" in out
    assert "[tensor-parallel]" in out and "n_head" not in out.split("error:")[1].split("\n")[0].replace("n_kv_head", "")
    code, out, _ = _check("--tp", "3", str(ROOT / "specs" / "llama3.snf"))
    assert code == 1 and "tp=3 does not divide H = n_head = 32" in out and "mlp_hidden = 8192" in out


def _toy(tmp_path, f: int, extra: str, body: str) -> str:
    """A spec of an embedding and an MLP of width `f` on lines 15-16 (`h`), then `body` from line 17:
    its path."""
    spec, scaled = tmp_path / "toy.snf", " * s" if "s :" in extra else ""
    spec.write_text(f"param:\n  D : int = 8\n  F : int = {f}\n  V : int = 10\n"
                    "input:\n  idx : Tensor([B, T], int64)\n"
                    "parameter:\n  emb : Tensor([V, D], float32)\n  w_in : Tensor([F, D], float32)\n"
                    f"  w_out : Tensor([D, F], float32)\n{extra}"
                    "output:\n  y : Tensor([B, T, D], float32)\n"
                    "let x = gather(emb, idx)\n"
                    f"let h = x + linear(relu(linear(x, weight=w_in){scaled}), weight=w_out)\n"
                    f"{body}\n")
    return str(spec)


def test_a_linear_kept_whole_says_which_op_and_line(tmp_path):
    """A projection whose features a softmax normalises stays whole, and the plan says why; a tp that
    does not divide the MLP's width is refused at the linear's line."""
    spec = _toy(tmp_path, 6, "  w_mix : Tensor([D, D], float32)\n",
                "let y = h + softmax(linear(h, weight=w_mix), axis=-1)")
    code, out, _ = _check("--tp", "4", spec)
    assert code == 1
    assert "w_mix" in out and "`softmax` normalises along it" in out and "line 16" in out
    assert "toy.snf:15:25: error: tp=4 does not divide F = 6 in the default config" in out


def test_a_parameter_used_whole_does_not_shard_with_activations(tmp_path):
    """`s` scales the sharded features of `w_in` (it would shard with them), but a later line uses it with
    whole values: it stays whole, and so does `w_in`, with that line as the reason."""
    spec = _toy(tmp_path, 16, "  s : Tensor([F], float32)\n  w_s : Tensor([D, F], float32)\n",
                "let y = h + linear(s * s, weight=w_s)")
    code, out, _ = _check("--tp", "2", spec)
    assert code == 0
    assert "partial: w_in stays whole at line 17: `s` is also used with whole activations" in out
    assert "shard:" not in out


def test_check_tp_takes_a_number_of_ranks():
    for bad in ("0", "-2", "two"):
        code, _, err = _check("--tp", bad, str(ROOT / "specs" / "llama3.snf"))
        assert code == 1 and f"--tp takes a number of ranks >= 1, not '{bad}'" in err


def test_the_generated_model_carries_the_plan():
    """generated/llama3.py's `Model.tp_plan` is the pass's, and its `tp_requires` refuse tp=16 by the
    key/value heads, as `snfc check --tp 16` does."""
    from generated.llama3 import Config, Model
    assert Model.tp_plan == plans("llama3").tp.styles()
    cfg = Config()

    def broken(tp):
        return [message for holds, message in Model.tp_requires if not holds(cfg, tp)]
    assert broken(2) == [] and broken(8) == []
    assert broken(16) == ["tp must divide KVH = n_kv_head, the heads `reshape` makes of sharded features "
                          "(llama3.snf:72)"]


def test_an_op_without_a_rule_refuses_a_sharded_argument(monkeypatch):
    """Without `swiglu`'s rule, llama3's gate and up stay whole, and the plan names the op and its line."""
    from dataclasses import replace

    from snf.compiler import analyze, planned
    from snf.source import Source
    monkeypatch.setitem(all_ops(), "swiglu", replace(all_ops()["swiglu"], shard=None))
    tp = planned(analyze(Source.read(ROOT / "specs" / "llama3.snf")).model).tp
    assert {(w, why, span.line) for w, why, span, _ in tp.refused} >= {
        ("gate_weight", "`swiglu` has no sharding rule", 109), ("up_weight", "`swiglu` has no sharding rule", 109)}
    assert not tp.full and tp.styles()["layers.*.gate"] == "replicate"



def test_sequence_parallel_is_refused_where_the_stream_is_not_per_position(tmp_path):
    """Between the row-wise output and the next column-wise input, a cumulative sum over the positions
    refuses sequence parallelism for the model, at its line; the tensor-parallel plan is unchanged."""
    spec = _toy(tmp_path, 16, "", "let y = cumsum(h, axis=1)")
    code, out, _ = _check("--tp", "2", spec)
    assert code == 0 and "w_in" in out and "colwise" in out
    assert out.splitlines()[-1] == "  no sequence parallel: `cumsum` does not work per position (line 15)"


def test_a_requirement_on_a_computed_int_has_its_numbers(tmp_path):
    """An MLP width the config computes (`F = int(D * r)`, folded by the checker) is evaluated at the
    defaults like a field: its numbers are printed, and a tp that does not divide it is refused."""
    spec = tmp_path / "computed.snf"
    spec.write_text("param:\n  D : int = 8\n  r : float = 1.5\n  V : int = 10\n  F = int(D * r)\n"
                    "input:\n  idx : Tensor([B, T], int64)\n"
                    "parameter:\n  emb : Tensor([V, D], float32)\n  w_in : Tensor([F, D], float32)\n"
                    "  w_out : Tensor([D, F], float32)\n"
                    "output:\n  y : Tensor([B, T, D], float32)\n"
                    "let x = gather(emb, idx)\n"
                    "let y = x + linear(relu(linear(x, weight=w_in)), weight=w_out)\n")
    code, out, _ = _check("--tp", "2", str(spec))
    assert code == 0 and "requires tp must divide F, the features of a column-wise `linear` (computed.snf:15): " \
                         "12 at the defaults, 6 per rank" in out
    code, out, _ = _check("--tp", "5", str(spec))
    assert code == 1 and "tp=5 does not divide F = 12 in the default config" in out


def test_expert_weights_shard_by_their_role_not_their_names(tmp_path):
    """Experts named w1, w2, w3 (no `down` in any name): each weight's axis of the hidden width is the
    one of its role in moe_experts (down=w2: axis 2), as `Model.tp_expert_axes` carries it."""
    from snf.compiler import analyze, planned
    from snf.source import Source
    spec = tmp_path / "experts.snf"
    spec.write_text("param:\n  D : int = 8\n  F : int = 4\n  E : int = 4\n  K : int = 2\n  V : int = 10\n"
                    "input:\n  idx : Tensor([B, T], int64)\n"
                    "parameter:\n  emb : Tensor([V, D], float32)\n  r : Tensor([E, D], float32)\n"
                    "  w1 : Tensor([E, F, D], float32)\n  w2 : Tensor([E, D, F], float32)\n"
                    "  w3 : Tensor([E, F, D], float32)\n  b2 : Tensor([E, D], float32)\n"
                    "output:\n  y : Tensor([B, T, D], float32)\n"
                    "let x = gather(emb, idx)\n"
                    "let probs = softmax(linear(x, weight=r), axis=-1)\n"
                    "let y = x + moe_experts(x, top_k_indices(probs, K), top_k(probs, K), gate=w1, up=w3, down=w2, "
                    "down_bias=b2, act=\"silu\")\n")
    tp = planned(analyze(Source.read(spec)).model).tp
    assert dict(tp.expert_axes) == {"w1": 1, "w2": 2, "w3": 1, "b2": None}
    assert {p.key: p.style for p in tp.placements if p.key != "emb"} == {
        "r": "replicate", "w1": "experts", "w2": "experts", "w3": "experts", "b2": "experts"}


def test_a_size_a_rank_divides_that_also_splits_whole_features_is_refused(tmp_path):
    """F, the MLP's sharded width (a rank's config divides it: tp_local), also splits a whole value (a
    table's rows reshaped by F at line 16): divided there too, it would give wrong sizes. The plan keeps
    the MLP whole, naming that op and line, and F is no size a rank divides (kimi_linear's lin_head_dim,
    whisper's d_model were such sizes)."""
    from snf.compiler import analyze, planned
    from snf.source import Source
    spec = _toy(tmp_path, 16, "  tab : Tensor([V, 2 * F], float32)\n",
                "let y = h * sum(sum(reshape(gather(tab, idx), [B, T, 2, F]), axis=3, keepdim=True), axis=2)")
    code, out, _ = _check("--tp", "2", str(spec))
    assert code == 0 and "partial: w_in stays whole at line 16: `F`, which a rank holds 1/tp of, also sizes a whole " \
                         "value (`reshape` at line 16)" in out
    tp = planned(analyze(Source.read(Path(spec))).model).tp
    assert tp.local() == () and tp.styles() == {"emb": "vocab_embedding", "tab": "vocab_embedding",
                                                "w_in": "replicate", "w_out": "replicate"}
    assert "lin_head_dim" not in plans("kimi_linear").tp.local() and "d_model" not in plans("whisper").tp.local()


def test_pieces_of_pieces_are_flattened_and_a_bound_a_rank_cannot_read_is_refused(tmp_path):
    """A projection sliced into a and bc, then bc (after a convolution over it) into b and c: its rows
    are the leaf pieces a, b, c, the convolution's weight the pieces b, c. Cut at a constant instead
    (4, not a rank's part of W = H * K), the projection stays whole, with that line as the reason; so
    it does where bc meets a sharded value laid out otherwise (each rank's elements other features)."""
    def spec(cut: str = "W", mix: bool = False) -> str:
        path = tmp_path / "nested.snf"
        mixed = " + linear(bc * linear(x, weight=w_m), weight=w_o)" if mix else ""
        path.write_text("param:\n  D : int = 8\n  H : int = 2\n  K : int = 4\n  V : int = 10\n  W = H * K\n"
                        "input:\n  idx : Tensor([B, T], int64)\n"
                        "parameter:\n  emb : Tensor([V, D], float32)\n  w_in : Tensor([3 * W, D], float32)\n"
                        f"  cw : Tensor([2 * W, 1, 4], float32)\n  w_b : Tensor([D, {cut}], float32)\n"
                        f"  w_c : Tensor([D, 2 * W - {cut}], float32)\n  w_a : Tensor([D, W], float32)\n"
                        + ("  w_m : Tensor([2 * W, D], float32)\n  w_o : Tensor([D, 2 * W], float32)\n" if mix else "")
                        + "output:\n  y : Tensor([B, T, D], float32)\n"
                        "let x = gather(emb, idx)\n"
                        "let p = linear(x, weight=w_in)\n"
                        "let bc = causal_conv1d(p[:, :, W:3 * W], weight=cw)\n"
                        "let a = reshape(p[:, :, 0:W], [B, T, H, K])\n"  # W's units: H heads
                        f"let y = x + linear(bc[:, :, 0:{cut}], weight=w_b) + linear(bc[:, :, {cut}:2 * W], weight=w_c)"
                        f" + linear(reshape(a, [B, T, W]), weight=w_a){mixed}\n")
        return str(path)
    from snf.compiler import analyze, planned
    from snf.dims import Dim
    from snf.source import Source
    tp = planned(analyze(Source.read(spec())).model).tp
    w = Dim.sym("H") * Dim.sym("K")
    assert dict(tp.pieces) == {"w_in": (w, w, w), "cw": (w, w)}
    _, out, _ = _check("--tp", "2", spec("4"))
    assert "partial: w_in stays whole at line 22: the bound `4` of its pieces is not a rank's part of the whole" \
        in out, out
    _, out, _ = _check("--tp", "2", spec(mix=True))
    assert "partial: w_in stays whole at line 24: `mul` combines it with sharded features laid out in other " \
        "pieces" in out, out


def test_experts_with_a_weight_computed_in_the_body_stay_whole(tmp_path):
    """An expert weight the body computes (`down=w2[0]`, a slice of a parameter) is no parameter the
    runtime could shard: the experts stay whole, and their hidden width is no size a rank divides (a
    rank's forward would read it divided beside whole weights). It once kept the others sharded and F
    divided, and a random spec whose F also sized a whole value stopped the plan on an internal assert."""
    from snf.compiler import analyze, planned
    from snf.source import Source
    spec = tmp_path / "computed_expert.snf"
    spec.write_text("param:\n  D : int = 8\n  F : int = 4\n  E : int = 4\n  K : int = 2\n  V : int = 10\n"
                    "input:\n  idx : Tensor([B, T], int64)\n"
                    "parameter:\n  emb : Tensor([V, D], float32)\n  r : Tensor([E, D], float32)\n"
                    "  w1 : Tensor([E, F, D], float32)\n  w2 : Tensor([2, E, D, F], float32)\n"
                    "output:\n  y : Tensor([B, T, D], float32)\n"
                    "let x = gather(emb, idx)\n"
                    "let probs = softmax(linear(x, weight=r), axis=-1)\n"
                    "let y = x + moe_experts(x, top_k_indices(probs, K), top_k(probs, K), up=w1, down=w2[0])\n")
    tp = planned(analyze(Source.read(spec)).model).tp
    assert dict(tp.expert_axes) == {} and "experts" not in tp.styles().values()
    assert "F" not in tp.local() and not any(r.units.as_symbol() == "F" for r in tp.requires)
