"""Mixtures of experts: `moe_experts`' sparse form against its dense formula and the NumPy reference
(values and gradients), the routing variants written with the ordinary ops around `top_k`, the
expert FLOPs torch's FlopCounterMode sees, per-expert checkpoint keys, and Mixtral's load-balancing
loss and window-less attention against transformers."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

import snf
from snf.compiler import analyze, generate_source
from snf.interpret import interpret
from snf.runtime import experts
from snf.source import Source


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)  # the random inputs of each test: the same every run


def _weights(e=8, f=24, d=16, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=g, dtype=dtype) * 0.3 for shape in ((e, f, d), (e, f, d), (e, d, f))]


def _route(x, router, k):
    probs = F.softmax(x @ router.T, dim=-1)
    w, i = probs.topk(k, dim=-1)
    return w / w.sum(-1, keepdim=True), i


@pytest.mark.parametrize("biased", [False, True])
@pytest.mark.parametrize("gated,act", [(True, "silu"), (False, "silu"), (True, "gelu"), (False, "gelu"),
                                       (True, "gelu_tanh"), (False, "gelu_tanh"), (True, "relu"), (False, "relu"),
                                       (True, "relu2"), (False, "relu2"), (True, "clamped_swiglu")])
def test_sparse_matches_dense_values_and_gradients(gated, act, biased):
    """Through the custom op (forward and its hand-written backward) against the dense formula
    under torch.autograd, in float64: equal to rounding. With the experts' biases too, and gpt-oss's
    clamped SwiGLU at a limit low enough that both clamps bind; the values also against the NumPy
    reference."""
    gate, up, down = _weights()
    g = torch.Generator().manual_seed(1)
    biases = [torch.randn(shape, generator=g, dtype=torch.float64) if biased else None
              for shape in ((8, 24), (8, 24), (8, 16))]
    if not gated:
        biases[0] = None
    x = torch.randn(37, 16, dtype=torch.float64)
    w, i = _route(x, torch.randn(8, 16, dtype=torch.float64), 2)
    extra = (1.702, 0.3) if act == "clamped_swiglu" else (1.0, 0.0)

    def leaves():
        return [t.clone().requires_grad_() if t is not None else None for t in (x, w, gate, up, down, *biases)]

    def run(fn, t):
        return fn(t[0], i, t[1], t[2] if gated else None, t[3], t[4], act, *t[5:], *extra)
    sparse_leaves, dense_leaves = leaves(), leaves()
    sparse, dense = run(experts._MOE_OP, sparse_leaves), run(experts._moe_dense, dense_leaves)
    torch.testing.assert_close(sparse, dense, rtol=1e-12, atol=1e-12)
    from snf.ops.moe import _np_moe
    kw = dict(gate_bias=biases[0], up_bias=biases[1], down_bias=biases[2])
    ref = _np_moe(x.numpy(), i.numpy(), w.numpy(), up.numpy(), down.numpy(), gate.numpy() if gated else None, act,
                  **{k: v.numpy() if v is not None else None for k, v in kw.items()},
                  **(dict(alpha=extra[0], limit=extra[1]) if act == "clamped_swiglu" else {}))
    np.testing.assert_allclose(sparse.detach().numpy(), ref, rtol=1e-12, atol=1e-12)
    grad = torch.randn_like(sparse)
    wrt = [n for n, t in enumerate(sparse_leaves) if t is not None and (gated or n != 2)]
    got = torch.autograd.grad(sparse, [sparse_leaves[n] for n in wrt], grad)
    want = torch.autograd.grad(dense, [dense_leaves[n] for n in wrt], grad)
    for n, a, b in zip(wrt, got, want):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10, msg=f"gradient {n}")


def test_sparse_float32_gradients_within_1e_5():
    gate, up, down = (t.float() for t in _weights())
    x = torch.randn(64, 16)
    router = torch.randn(8, 16, requires_grad=True)

    def loss(fn):
        w, i = _route(x, router, 2)
        return (fn(x, i, w, gate, up, down, "silu") ** 2).sum()
    g_sparse = torch.autograd.grad(loss(experts._MOE_OP), router)[0]
    g_dense = torch.autograd.grad(loss(experts._moe_dense), router)[0]
    torch.testing.assert_close(g_sparse, g_dense, rtol=1e-5, atol=1e-5)


def test_an_expert_with_no_tokens_and_an_empty_batch():
    gate, up, down = _weights(e=4)
    x = torch.randn(3, 16, dtype=torch.float64)
    i = torch.tensor([[0, 1], [1, 0], [0, 1]])  # experts 2 and 3 get nothing
    w = torch.rand(3, 2, dtype=torch.float64)
    torch.testing.assert_close(experts._MOE_OP(x, i, w, gate, up, down, "silu"),
                               experts._moe_dense(x, i, w, gate, up, down, "silu"))
    empty = experts._MOE_OP(x[:0], i[:0], w[:0], gate, up, down, "silu")
    assert empty.shape == (0, 16)


@pytest.mark.slow
def test_the_dense_form_keeps_a_dynamic_token_count_with_opt_einsum_installed():
    """With opt_einsum installed (as where JAX is), torch orders an einsum of three operands by
    their sizes, which fixed the token count of a compiled decode step's batch, marked dynamic:
    generate of every MoE spec fell back to eager on CUDA. The dense form's einsums take two."""
    pytest.importorskip("opt_einsum")
    assert torch.backends.opt_einsum.enabled
    gate, up, down = _weights(e=4)
    run = torch.compile(lambda x, i, w: experts._moe_dense(x, i, w, gate, up, down, "silu"),
                        fullgraph=True, dynamic=False)
    torch._dynamo.reset()
    for n in (2, 3):
        x, w = torch.randn(n, 16, dtype=torch.float64), torch.rand(n, 2, dtype=torch.float64)
        i = torch.randint(0, 4, (n, 2))
        torch._dynamo.mark_dynamic(x, 0)
        torch.testing.assert_close(run(x, i, w), experts._moe_dense(x, i, w, gate, up, down, "silu"))
    torch._dynamo.reset()


@pytest.mark.parametrize("dense", [True, False])
def test_autocast_bfloat16(dense, monkeypatch):
    """Under autocast a float32 router's weights meet bfloat16 activations and float32 experts:
    the result is bfloat16, near the float32 one, in both forms."""
    monkeypatch.setattr(experts, "_MOE_DENSE_MACS", 10 ** 12 if dense else -1)
    gate, up, down = (t.float() for t in _weights(e=4))
    g = torch.Generator().manual_seed(7)
    x = torch.randn(24, 16, generator=g)
    w, i = _route(x, torch.randn(4, 16, generator=g), 2)
    want = experts._moe_experts(x, i, w, gate, up, down, "silu")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = experts._moe_experts(x.bfloat16(), i, w, gate, up, down, "silu")
    assert got.dtype == torch.bfloat16
    assert (got.float() - want).abs().max() <= 0.02 * want.abs().max()  # bfloat16's 8 bits of mantissa


def test_indices_out_of_range_are_refused():
    gate, up, down = _weights(e=4)
    x = torch.randn(2, 16, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"expert indices must be in \[0, 4\), got 4"):
        experts._moe_experts(x, torch.tensor([[0, 4], [1, 2]]), torch.ones(2, 2, dtype=torch.float64), gate, up,
                             down, "silu")


def test_flop_counter_sees_top_k_cost():
    """8 experts, top-2: the forward's FLOPs (router and experts, as FlopCounterMode counts them) are
    within 1.2x of the top-k cost. The op's registered formula equals what the counter sees of the
    sparse form's own aten products, counted in eager with the op unwrapped, so the formula is
    not a way to hide them."""
    e, f, d, n, k = 8, 128, 64, 512, 2  # large enough for the sparse form (_moe_dense_wins)
    gate, up, down = (t.float() for t in _weights(e, f, d))
    router = torch.randn(e, d)
    x = torch.randn(n, d)
    assert not experts._moe_dense_wins(n, e, f, d, True)
    with FlopCounterMode(display=False) as counter:
        w, i = _route(x, router, k)
        experts._moe_experts(x, i, w, gate, up, down, "silu")
    top_k_cost = 2 * n * d * e + 2 * n * k * f * d * 3  # the router, and k experts' three products per token
    assert top_k_cost <= counter.get_total_flops() <= 1.2 * top_k_cost
    dense_cost = 2 * n * d * e + 2 * n * e * f * d * 3
    assert counter.get_total_flops() < dense_cost / 3
    with FlopCounterMode(display=False) as inner:
        experts._moe_sparse(x, i, w, gate, up, down, "silu")
    assert inner.get_total_flops() == experts._moe_flops(x.shape, i.shape, up.shape, True)


# ----------------------------------------------------------------------------- routing variants in specs

_ROUTING = """param:
  D : int = 8
  E : int = 6
  F : int = 12
  K : int = 2
input:
  x : Tensor([B, T, D], float32)
parameter:
  router : Tensor([E, D], float32)
  shared_gate : Tensor([1, D], float32)
  gate : Tensor([E, F, D], float32)
  up : Tensor([E, F, D], float32)
  down : Tensor([E, D, F], float32)
  s_gate : Tensor([F, D], float32)
  s_up : Tensor([F, D], float32)
  s_down : Tensor([D, F], float32)
output:
  y : Tensor([B, T, D], float32)
let logits = linear(x, weight=router)
{body}
"""

VARIANTS = {
    # softmax, top-k, renormalised (Mixtral, Qwen3-MoE with norm_topk_prob)
    "softmax_topk_renorm": ("let p = softmax(logits)\nlet w = top_k(p, K)\n"
                            "let y = moe_experts(x, top_k_indices(p, K), w / sum(w, keepdim=True), gate=gate, up=up, "
                            "down=down)",
                            lambda p: _softmax_topk(p, True)),
    # softmax, top-k, as they are (OLMoE, Qwen2-MoE)
    "softmax_topk": ("let p = softmax(logits)\n"
                     "let y = moe_experts(x, top_k_indices(p, K), top_k(p, K), gate=gate, up=up, down=down)",
                     lambda p: _softmax_topk(p, False)),
    # top-k of the logits, then a softmax over the k (Switch-style, DBRX's ordering)
    "topk_softmax": ("let y = moe_experts(x, top_k_indices(logits, K), softmax(top_k(logits, K)), gate=gate, "
                     "up=up, down=down)",
                     lambda p: (F.softmax(p.topk(2).values, -1), p.topk(2).indices)),
    # sigmoid gates (DeepSeek-V3 / Llama 4 style), no renormalisation
    "sigmoid": ("let s = sigmoid(logits)\n"
                "let y = moe_experts(x, top_k_indices(s, K), top_k(s, K), gate=gate, up=up, down=down)",
                lambda p: (torch.sigmoid(p).topk(2).values, torch.sigmoid(p).topk(2).indices)),
}


def _softmax_topk(logits, renorm):
    w, i = F.softmax(logits, -1).topk(2)
    return (w / w.sum(-1, keepdim=True) if renorm else w), i


def _module(text, name):
    res = analyze(Source.from_text(f"{name}.snf", text))
    assert res.ok, [d.message for d in res.diagnostics]
    ns: dict = {}
    exec(compile(generate_source(res), f"<{name}>", "exec"), ns)
    return res.model, ns["Model"]


def _spec_params(m):
    """The module's parameters under the spec's names (no layer loop here)."""
    own = m.state_dict()
    table = type(m).__init__.__globals__["spec_parameters"](m.config)  # the generated module's
    return {n: own[p.key] if p.rows is None else own[p.key][p.rows[0]:p.rows[1]] for n, p in table.items()}


def _formula(m, x, route):
    """The layer written directly in torch: each token's k experts, a loop over tokens and slots."""
    m = _spec_params(m)
    w, i = route(F.linear(x, m["router"]))
    out = torch.zeros_like(x)
    for b, t in np.ndindex(*x.shape[:2]):
        for j in range(w.shape[-1]):
            e, h = int(i[b, t, j]), x[b, t]
            out[b, t] += w[b, t, j] * (m["down"][e] @ (F.silu(m["gate"][e] @ h) * (m["up"][e] @ h)))
    return out


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_routing_variants_match_a_direct_formula(variant, monkeypatch):
    monkeypatch.setenv("SNF_COMPILE", "0")
    body, route = VARIANTS[variant]
    model, Model = _module(_ROUTING.replace("{body}", body), variant)
    torch.manual_seed(0)
    m = Model().eval()
    x = torch.randn(2, 5, 8)
    want = _formula(m, x, route)
    for dense in (True, False):  # both lowerings
        monkeypatch.setattr(experts, "_MOE_DENSE_MACS", 10 ** 12 if dense else -1)
        with torch.no_grad():
            got = m(x)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    params = {n: p.detach().double().numpy() for n, p in _spec_params(m).items()}
    ref = interpret(model, params, {"x": x.double().numpy()})["y"]
    np.testing.assert_allclose(ref, want.double().numpy(), rtol=1e-5, atol=1e-5)


def test_shared_expert_with_its_own_sigmoid_gate(monkeypatch):
    """Qwen2-MoE's shared expert: a dense SwiGLU MLP scaled by sigmoid(linear(x)), added to the routed ones."""
    monkeypatch.setenv("SNF_COMPILE", "0")
    body = ("let p = softmax(logits)\n"
            "let routed = moe_experts(x, top_k_indices(p, K), top_k(p, K), gate=gate, up=up, down=down)\n"
            "let shared = linear(swiglu(linear(x, weight=s_gate), linear(x, weight=s_up)), weight=s_down)\n"
            "let y = routed + sigmoid(linear(x, weight=shared_gate)) * shared")
    _, Model = _module(_ROUTING.replace("{body}", body), "shared")
    torch.manual_seed(1)
    m = Model().eval()
    x = torch.randn(2, 4, 8)
    p = _spec_params(m)
    shared = F.linear(F.silu(F.linear(x, p["s_gate"])) * F.linear(x, p["s_up"]), p["s_down"])
    want = _formula(m, x, lambda q: _softmax_topk(q, False)) + torch.sigmoid(F.linear(x, p["shared_gate"])) * shared
    with torch.no_grad():
        torch.testing.assert_close(m(x), want, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- Mixtral against transformers

transformers = pytest.importorskip("transformers")


def _mixtral(tmp_path, **overrides):
    from tests.test_from_pretrained import saved
    return saved(tmp_path, "mixtral", **overrides)


def test_mixtral_aux_loss_matches_transformers(tmp_path):
    hf, folder = _mixtral(tmp_path)
    model = snf.from_pretrained(folder)
    idx = torch.randint(0, hf.config.vocab_size, (2, 9), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        want = hf(idx, output_router_logits=True)
        got = model(idx)
    torch.testing.assert_close(got.aux_loss, want.aux_loss, rtol=1e-5, atol=1e-6)


def _hf_greedy(hf, prompt, n):
    """Greedy decoding by transformers' full forward, no cache. For this test's prompt transformers'
    generate departs from it (tiny random Mixtral, second sequence, second new token: generate picks
    91 where its own forward of the same tokens ranks 65 first by a margin of 1); snfc's generate,
    sparse and dense, follows the forward."""
    seq = prompt
    for _ in range(n):
        with torch.no_grad():
            seq = torch.cat([seq, hf(seq).logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return seq


@pytest.mark.parametrize("family,overrides", [("mixtral", {}), ("olmoe", {}), ("olmoe", {"norm_topk_prob": True}),
                                              ("qwen3_moe", {}), ("qwen3_moe", {"norm_topk_prob": False}),
                                              ("qwen2_moe", {}), ("qwen2_moe", {"norm_topk_prob": True}),
                                              ("qwen2_moe", {"num_hidden_layers": 4, "decoder_sparse_step": 3}),
                                              ("qwen3_moe", {"num_hidden_layers": 4, "decoder_sparse_step": 2,
                                                             "mlp_only_layers": [0, 3]}),
                                              ("gpt_oss", {})],
                         ids=["mixtral", "olmoe", "olmoe-renormalised", "qwen3_moe", "qwen3_moe-not-renormalised",
                              "qwen2_moe", "qwen2_moe-renormalised", "qwen2_moe-step3", "qwen3_moe-step2-mlp-only",
                              "gpt_oss"])
def test_sparse_lowering_matches_transformers(tmp_path, monkeypatch, family, overrides):
    """The tiny test configs pick the dense form (_moe_dense_wins); here the sparse one, forced:
    logits, the load-balancing loss and greedy generate against transformers."""
    from tests.test_from_pretrained import saved
    hf, folder = saved(tmp_path, family, **overrides)
    model = snf.from_pretrained(folder)
    monkeypatch.setattr(experts, "_MOE_DENSE_MACS", -1)
    idx = torch.randint(0, hf.config.vocab_size, (2, 13), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        want, got = hf(idx, output_router_logits=True), model(idx)
    assert (got.logits - want.logits).abs().max() <= 1e-5 * want.logits.abs().max()
    torch.testing.assert_close(got.aux_loss, want.aux_loss, rtol=1e-5, atol=1e-6)
    assert torch.equal(model.generate(idx[:, :5], 6, temperature=0), _hf_greedy(hf, idx[:, :5], 6))


def test_mixtral_without_a_window(tmp_path):
    hf, folder = _mixtral(tmp_path, sliding_window=None)
    model = snf.from_pretrained(folder)
    assert model.config.sliding_window == model.config.block_size
    idx = torch.randint(0, hf.config.vocab_size, (2, 11), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        want, got = hf(idx).logits, model(idx).logits
    assert (got - want).abs().max() <= 1e-5 * want.abs().max()
    assert torch.equal(model.generate(idx[:, :5], 6, temperature=0),
                       hf.generate(idx[:, :5], max_new_tokens=6, do_sample=False, pad_token_id=0))


def test_mixtral_checkpoint_has_one_key_per_expert(tmp_path):
    _, folder = _mixtral(tmp_path)
    model = snf.from_pretrained(folder)
    from snf.interop import spec_state
    from snf.pretrained import hf_state_dict
    sd, own = hf_state_dict(model), spec_state(model)
    assert sd["model.layers.1.block_sparse_moe.experts.3.w2.weight"].shape == (32, 48)
    assert torch.equal(sd["model.layers.1.block_sparse_moe.experts.3.w1.weight"], own["gate_weight"][1, 3])
    assert torch.equal(sd["model.layers.0.block_sparse_moe.experts.2.w2.weight"], own["down_weight"][0, 2])
    assert not any(".mlp." in key for key in sd)


# Mixtral on the compiled path (its sparse experts op inside the compiled graphs: logits and greedy
# generate against transformers, training gradients against eager) runs in its spec session:
# tests/property/test_session.py, test_every_spec_survives_a_session[mixtral-cpu].


_TIES = """param:
  E : int = 6

input:
  s : Tensor([B, E], float32)

output:
  i : Tensor([B, 3], int64)
  v : Tensor([B, 3], float32)

let i = top_k_indices(s, 3)
let v = top_k(s, 3)
"""


@pytest.mark.parametrize("compiled", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_ties_go_to_the_lower_index_everywhere(compiled, monkeypatch):
    """Equal scores (an all-zero router input: session seed 11104) pick the lower indices first, in
    the module as in the reference, eager and compiled; torch.topk's order among ties is unspecified."""
    monkeypatch.setenv("SNF_COMPILE", "0")
    model, Model = _module(_TIES, "ties")
    m = Model()
    s = torch.tensor([[0.0] * 6, [1.0, 2.0, 2.0, 0.0, 2.0, 2.0], [5.0, 1.0, 1.0, 1.0, 1.0, 0.0]])
    forward = torch.compile(m.forward, fullgraph=True) if compiled else m.forward
    out = forward(s)
    ref = interpret(model, {}, {"s": s.double().numpy()})
    assert out.i.tolist() == ref["i"].tolist() == [[0, 1, 2], [1, 2, 4], [0, 1, 2]]
    assert out.v.tolist() == ref["v"].tolist()
