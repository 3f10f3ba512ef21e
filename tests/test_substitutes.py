"""docs/language.md section 12's substitutes compute what they stand for: the dense top-2 mixture
of experts gives the experts' outputs weighted as a sparse top-2 router weights them (torch.topk,
then scatter), to float rounding."""

from __future__ import annotations

import re

import torch

import snf
from conftest import REPO


def _moe_spec(tmp_path):
    text = (REPO / "docs" / "language.md").read_text(encoding="utf-8")
    section = text[text.index("## 12."):]
    block = re.search(r"^( *)```snf\n(.*?)^\1```", section, re.S | re.M)
    spec = tmp_path / "moe.snf"
    spec.write_text("\n".join(line[len(block.group(1)):] for line in block.group(2).splitlines()) + "\n")
    return spec


def test_dense_top2_routing_equals_sparse_top2(tmp_path):
    mod = snf.load(_moe_spec(tmp_path))
    torch.manual_seed(0)
    model = mod.Model()
    where = mod.spec_parameters(model.config)
    state = model.state_dict()

    def weight(name, e=None):
        key = where[name][0]
        return state[key if e is None else key.replace("{l}", str(e))]

    x = torch.randn(7, model.config.D)
    probs = torch.softmax(x @ weight("router").T, dim=-1)
    top, chosen = probs.topk(2, dim=-1)
    gates = torch.zeros_like(probs).scatter(-1, chosen, top / top.sum(-1, keepdim=True))
    want = sum(gates[:, e:e + 1] * (torch.nn.functional.gelu(x @ weight("w_in", e).T) @ weight("w_out", e).T)
               for e in range(model.config.n_expert))
    with torch.no_grad():
        got = model(x)
    got = got.y if hasattr(got, "y") else got
    assert (got - want).abs().max() <= 1e-6 * want.abs().max()
