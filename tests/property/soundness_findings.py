"""Soundness findings as minimal specs: each one `snfc check` approved, and whose module
then misbehaved (or, for `branch-hides-error`, whose diagnostics hid a defect).

`test_soundness_findings.py` runs each through `runner.run`; while a finding is open (in `known.OPEN`)
its test is `xfail(strict=True)`, so fixing it flips the test. The property test found the
ones marked (property); the others are issue 10's own examples, shrunk by hand.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Finding:
    id: str
    owner: str  # who fixes it: "soundness" (the checker's type rules) or "codegen" (the lead)
    what: str
    spec: str
    domains: dict = field(default_factory=dict)  # sizes and config values to try
    int_high: dict = field(default_factory=dict)
    masks: frozenset = frozenset()
    features: frozenset = frozenset()


def _f(id, owner, what, spec, **kw) -> Finding:
    return Finding(id, owner, what, spec.strip() + "\n", **kw)


FINDINGS = [
    # ------------------------------------------------------------------ silently wrong
    _f("negative-slice", "soundness", "x[:, -2:, :] is typed T + 2 long and returns 2", """
param:
  D : int = 4
input:
  x : Tensor([B, T, D], float32)
output:
  y : Tensor([B, T + 2, D], float32)
let y = x[:, -2:, :]
""", domains={"T": [3]}),
    _f("negative-slice-end", "soundness", "x[:, 0:-1, :] gets a dim of -1", """
param:
  D : int = 4
input:
  x : Tensor([B, T, D], float32)
output:
  y : Tensor([B, -1, D], float32)
let y = x[:, 0:-1, :]
""", domains={"T": [3]}),
    _f("loopvar-slice", "soundness", "pos[l:l + 1, :] is typed [P, D] but is [1, D]", """
param:
  n_layer : int = 2
  P : int = 4
  D : int = 3
parameter:
  pos : Tensor([P, D], float32)
input:
  x : Tensor([P * D], float32)
output:
  y : Tensor([P * D], float32)
let y = x
for l in 0..n_layer-1:
    y = y + reshape(pos[l:l + 1, :], [P * D])
"""),
    _f("loopvar-slice-prefix", "soundness", "pos[0:l, :] is typed [P, D] but is [l, D]", """
param:
  n_layer : int = 2
  P : int = 4
  D : int = 3
parameter:
  pos : Tensor([P, D], float32)
input:
  x : Tensor([P * D], float32)
output:
  y : Tensor([P * D], float32)
let y = x
for l in 0..n_layer-1:
    y = y + reshape(pos[0:l, :], [P * D])
"""),
    _f("optional-leak", "soundness", "let y = x; y = opt returns None for a non-optional output", """
param:
  D : int = 4
input:
  x : Tensor([B, D], float32)
  opt : Tensor([B, D], float32)?
output:
  y : Tensor([B, D], float32)
let y = x
y = opt
"""),
    _f("optional-leak-param", "soundness", "a conditional parameter (if flag else None) reaches an output", """
param:
  D : int = 4
  flag : bool = False
parameter:
  w : Tensor([D], float32) if flag else None
input:
  x : Tensor([D], float32)
output:
  y : Tensor([D], float32)
let y = x
y = w
""", domains={"flag": [False]}),
    _f("optional-leak-else", "soundness", "if opt exists: ... else: y = opt", """
param:
  D : int = 4
input:
  x : Tensor([B, D], float32)
  opt : Tensor([B, D], float32)?
output:
  y : Tensor([B, D], float32)
let y = x
if opt exists:
    y = x * 2.0
else:
    y = opt
"""),
    _f("int-div", "soundness", "x / 2 on int64 is typed int64 and returns float32", """
input:
  x : Tensor([B], int64)
output:
  y : Tensor([B], int64)
let y = x / 2
"""),
    _f("int-times-float", "soundness", "(property) x * 2.0 on int64 is typed int64 and returns float32", """
input:
  x : Tensor([B], int64)
output:
  y : Tensor([B], int64)
let y = x * 2.0
"""),
    _f("bool-arithmetic", "soundness", "(property) bool - bool is accepted; torch refuses it", """
input:
  m : Tensor([B], bool)
output:
  y : Tensor([B], bool)
let y = m - m
"""),
    _f("bool-times-int", "soundness", "(property) bool * 2 is typed bool and returns int64", """
input:
  m : Tensor([B], bool)
output:
  y : Tensor([B], bool)
let y = m * 2
"""),
    _f("bool-neg", "soundness", "(property) -m on a bool tensor is accepted; torch refuses it", """
input:
  m : Tensor([B], bool)
output:
  y : Tensor([B], bool)
let y = -m
"""),
    # ------------------------------------------------------------------ fails at run time
    _f("index-past-end", "soundness", "x[:, 5, :] on a [B, T, D] input", """
param:
  D : int = 4
input:
  x : Tensor([B, T, D], float32)
output:
  y : Tensor([B, D], float32)
let y = x[:, 5, :]
""", domains={"T": [2]}),
    _f("index-write-past-end", "soundness", "y[:, k, :] = ... past the end", """
param:
  D : int = 4
  k : int = 5
input:
  x : Tensor([B, T, D], float32)
output:
  y : Tensor([B, T, D], float32)
let y = x * 1.0
y[:, k, :] = full([B, D], 1.0, float32)
""", domains={"T": [2]}),
    _f("index-negative-past-start", "soundness", "(property) pos[-9] on an 8-row table", """
param:
  P : int = 8
  D : int = 2
parameter:
  pos : Tensor([P, D], float32)
input:
  x : Tensor([D], float32)
output:
  y : Tensor([D], float32)
let y = x + pos[-9]
"""),
    _f("loopvar-index-local", "soundness", "buf[l] into a local full([k, B, D]) with k < n_layer", """
param:
  n_layer : int = 3
  k : int = 1
  D : int = 2
input:
  x : Tensor([B, D], float32)
output:
  y : Tensor([B, D], float32)
let buf = full([k, B, D], 1.0, float32)
let y = x
for l in 0..n_layer-1:
    y = y + buf[l]
"""),
    _f("loopvar-index-input", "soundness", "past[l] into an input [K, B, D] whose first axis is not n_layer", """
param:
  n_layer : int = 3
  D : int = 2
input:
  x : Tensor([B, D], float32)
  past : Tensor([K, B, D], float32)
output:
  y : Tensor([B, D], float32)
let y = x
for l in 0..n_layer-1:
    y = y + past[l]
""", domains={"K": [1]}),
    _f("loopvar-write", "soundness", "buf[l] = h where buf's first axis is not the layer count", """
param:
  n_layer : int = 3
  D : int = 2
input:
  x : Tensor([B, D], float32)
output:
  buf : Tensor([2, B, D], float32)
let buf = full([2, B, D], 0.0, float32)
for l in 0..n_layer-1:
    buf[l] = x
"""),
    _f("runtime-divisibility", "soundness", "reshape(x, [B, T // 2, 2 * D]) with an odd T", """
param:
  D : int = 2
input:
  x : Tensor([B, T, D], float32)
output:
  y : Tensor([B, T // 2, 2 * D], float32)
let y = reshape(x, [B, T // 2, 2 * D])
""", domains={"T": [3]}),
    _f("negative-param-dim", "soundness", "Tensor([-3, D])", """
param:
  D : int = 4
parameter:
  w : Tensor([-3, D], float32)
input:
  x : Tensor([D], float32)
output:
  y : Tensor([-3, D], float32)
let y = w + x
"""),
    _f("negative-derived-dim", "soundness", "E = D - 8 with D = 4", """
param:
  D : int = 4
  E = D - 8
parameter:
  w : Tensor([E, D], float32)
input:
  x : Tensor([D], float32)
output:
  y : Tensor([E, D], float32)
let y = w + x
"""),
    _f("negative-full-dim", "soundness", "full([n - 5, D])", """
param:
  n : int = 2
  D : int = 4
input:
  x : Tensor([D], float32)
output:
  y : Tensor([n - 5, D], float32)
let y = full([n - 5, D], 1.0, float32) + x
"""),
    _f("negative-reshape-dim", "soundness", "reshape(x, [0 - B, ...])", """
param:
  D : int = 4
input:
  x : Tensor([B, D], float32)
output:
  y : Tensor([0 - B, -D], float32)
let y = reshape(x, [0 - B, -D])
"""),
    _f("empty-slice", "soundness", "x[:, 3:T] with T = 1 (lo > hi)", """
param:
  D : int = 4
input:
  x : Tensor([B, T, D], float32)
output:
  y : Tensor([B, T - 3, D], float32)
let y = x[:, 3:T]
""", domains={"T": [1]}),
    _f("gather-3d", "soundness", "gather on a 3-D table lowers to F.embedding ('weight' must be 2-D)", """
param:
  V : int = 5
  D : int = 2
parameter:
  table : Tensor([V, 2, D], float32)
input:
  idx : Tensor([B, T], int64)
output:
  y : Tensor([B, T, 2, D], float32)
let y = gather(table, idx)
""", int_high={"idx": "V"}),
    _f("literal-div-zero", "soundness", "1.0 / 0.0", """
param:
  D : int = 4
  s = 1.0 / 0.0
input:
  x : Tensor([D], float32)
output:
  y : Tensor([D], float32)
let y = x * s
"""),
    _f("literal-overflow", "soundness", "10.0 ** 400", """
param:
  D : int = 4
input:
  x : Tensor([D], float32)
output:
  y : Tensor([D], float32)
let y = x * 10.0 ** 400
"""),
    _f("int-negative-power", "soundness", "x ** -1 on int64", """
input:
  x : Tensor([B], int64)
output:
  y : Tensor([B], int64)
let y = x ** -1
""", int_high={"x": 3}),
    _f("negative-std", "soundness", "normal(std=-1.0)", """
param:
  D : int = 4
parameter:
  w : Tensor([D], float32) = normal(std=-1.0)
input:
  x : Tensor([D], float32)
output:
  y : Tensor([D], float32)
let y = x + w
"""),
    _f("sqrt-negative", "soundness", "sqrt(-8 * d_ff)", """
param:
  d_ff : int = 4
  s = sqrt(-8 * d_ff)
input:
  x : Tensor([B], float32)
output:
  y : Tensor([B], float32)
let y = x * s
"""),
    _f("power-tower", "soundness", "x * 2 ** 2 ** 2 ** 2 ** 2 (2**65536; one level more never ends)", """
input:
  x : Tensor([B], float32)
output:
  y : Tensor([B], float32)
let y = x * 2 ** 2 ** 2 ** 2 ** 2
"""),
    _f("bare-shape", "soundness", "let s = x.shape passes check, then compile exits 2", """
input:
  x : Tensor([B], float32)
output:
  y : Tensor([B], float32)
let s = x.shape
let y = x
"""),
    _f("interpreter-empty-batch", "soundness", "snf.interpret crashes on B = 0 or T = 0 (softmax, attention)", """
param:
  H : int = 1
  hd : int = 2
  D = H * hd
input:
  x : Tensor([B, T, D], float32)
output:
  y : Tensor([B, T, D], float32)
let q = reshape(x, [B, T, H, hd])
let y = reshape(flash_attention(q, q, q, causal=True), [B, T, D]) + softmax(x, axis=1)
""", domains={"B": [0, 2], "T": [0]}),
    _f("full-scalar", "soundness", "(property) full([], v) lowers to torch.full((,), ...): a SyntaxError", """
input:
  x : Tensor([B], float32)
output:
  y : Tensor([B], float32)
let y = x + full([], 2.5, float32)
"""),
    _f("full-dtype-value", "soundness", "(property) full([n], 0.5, int64): torch truncates, the interpreter keeps 0.5", """
param:
  n : int = 2
input:
  x : Tensor([n], float32)
output:
  y : Tensor([n], int64)
let y = full([n], 0.5, int64)
"""),
    # ------------------------------------------------------------------ code generation (the lead's)
    _f("param-dtype", "codegen", "float16 parameters are created as float32, so the first matmul fails", """
param:
  D : int = 4
parameter:
  w : Tensor([D, D], float16)
input:
  x : Tensor([B, D], float16)
output:
  y : Tensor([B, D], float16)
let y = linear(x, weight=w)
"""),
    _f("loop-whole-param", "codegen", "(property) a whole parameter read inside a layer loop: 'Model' has no attribute", """
param:
  n_layer : int = 2
  D : int = 4
parameter:
  w : Tensor([D, D], float32)
input:
  x : Tensor([B, D], float32)
output:
  y : Tensor([B, D], float32)
let y = x
for l in 0..n_layer-1:
    y = linear(y, weight=w)
"""),
    _f("loop-reads-written", "codegen", "issue 9 #3: full() in a layer loop after a per-layer write reads the written value", """
param:
  n_layer : int = 2
  D : int = 4
input:
  x : Tensor([B, T, D], float32)
output:
  ys : Tensor([n_layer, B, T, D], float32)
  z : Tensor([B, T, D], float32)
let ys = full([n_layer, B, T, D], 0.0, float32)
let a = x
let z = x
for l in 0..n_layer-1:
    a = a + x
    ys[l] = a
    let ones = full([B, T, D], 1.0, float32)
    z = z + ones
"""),
    _f("loop-reads-written-slice", "codegen", "(property) reading buf[l] in the loop that writes buf per layer: NameError", """
param:
  n_layer : int = 2
  D : int = 4
input:
  x : Tensor([B, D], float32)
output:
  y : Tensor([B, D], float32)
let buf = full([n_layer, B, D], 1.0, float32)
let y = x
for l in 0..n_layer-1:
    y = y + buf[l]
    buf[l] = y
"""),
    _f("loop-device", "codegen", "(property) full() in a layer loop that reads no outer tensor: compile fails", """
param:
  n_layer : int = 1
  F : int = 3
parameter:
  b : Tensor([n_layer, F], float32)
input:
  x : Tensor([F], float32)
output:
  y : Tensor([F], float32)
let y = x * 1.0
for l in 0..n_layer-1:
    let z = full([F], 1.0, float32)
    let v = b[l] + z
"""),
    _f("fully-masked-rows", "issue 12", "(property) causal attention with fewer keys than queries: rows with "
       "no key are NaN in the interpreter, finite in torch", """
param:
  H : int = 1
  hd : int = 2
  D = H * hd
input:
  x : Tensor([B, T, D], float32)
  mem : Tensor([B, S, D], float32)
output:
  y : Tensor([B, T, H, hd], float32)
let y = flash_attention(reshape(x, [B, T, H, hd]), reshape(mem, [B, S, H, hd]), reshape(mem, [B, S, H, hd]),
                        causal=True)
""", domains={"T": [3], "S": [1]}),
    _f("cache-length", "codegen", "issue 9 #2: generate crashes when the layer reshapes its concatenated cache", """
param:
  n_layer : int = 1
  H : int = 1
  hd : int = 2
  V : int = 5
  max_len : int = 8
  D = H * hd
input:
  idx : Tensor([B, T], int64)
  past_keys : Tensor([n_layer, B, T_past, H, hd], float32)?
parameter:
  emb : Tensor([V, D], float32)
  pos : Tensor([max_len, D], float32)
  wq : Tensor([n_layer, D, D], float32)
  wk : Tensor([n_layer, D, D], float32)
  head : Tensor([V, D], float32)
output:
  logits : Tensor([B, T, V], float32)
  new_keys : Tensor([n_layer, B, T_past + T, H, hd], float32)
let x = gather(emb, idx) + pos[T_past:T_past + T, :]
let new_keys = full([n_layer, B, T_past + T, H, hd], 0.0, float32)
for l in 0..n_layer-1:
    let q = reshape(linear(x, wq[l]), [B, T, H, hd])
    let k = reshape(linear(x, wk[l]), [B, T, H, hd])
    let kk = concat([past_keys[l], k], axis=1) if past_keys exists else k
    new_keys[l] = kk
    let flat = reshape(kk, [B, T_past + T, D])
    let a = flash_attention(q, kk, kk, causal=True)
    x = x + reshape(a, [B, T, D])
let logits = linear(x, weight=head)
""", int_high={"idx": "V"}),
    _f("cache-pairing", "codegen", "(property) generate feeds new_keys back as past_keys by their names, though "
       "new_keys [n_layer, ...] does not fit past_keys [T, ...]", """
param:
  n_layer : int = 2
  H : int = 1
  hd : int = 2
  V : int = 5
  D = H * hd
input:
  idx : Tensor([B, T], int64)
  past_keys : Tensor([T, B, T_past, H, hd], float32)?
parameter:
  emb : Tensor([V, D], float32)
  head : Tensor([V, D], float32)
output:
  logits : Tensor([B, T, V], float32)
  new_keys : Tensor([n_layer, B, T, H, hd], float32)
let x = gather(emb, idx)
let q = reshape(x, [B, T, H, hd])
let new_keys = full([n_layer, B, T, H, hd], 0.0, float32)
for l in 0..n_layer-1:
    new_keys[l] = q
let a = flash_attention(q, q, q, causal=True)
let logits = linear(reshape(a, [B, T, D]), weight=head)
""", int_high={"idx": "V"}, domains={"T": [2]}),
    _f("generate-token-range", "codegen", "(property) generate is emitted though the logits [B, T, V] have more "
       "classes than the token table [K, D] has rows: a sampled id can be out of range", """
param:
  H : int = 1
  hd : int = 2
  V : int = 7
  K : int = 4
  D = H * hd
input:
  idx : Tensor([B, T], int64)
parameter:
  emb : Tensor([K, D], float32)
  head : Tensor([V, D], float32)
output:
  logits : Tensor([B, T, V], float32)
  h : Tensor([B, T, D], float32)
let q = reshape(gather(emb, idx), [B, T, H, hd])
let h = reshape(flash_attention(q, q, q, causal=True), [B, T, D])
let logits = linear(h, weight=head)
"""),
    _f("generate-required-input", "codegen", "(property) generate is emitted, but it cannot pass a required input", """
param:
  H : int = 1
  hd : int = 2
  V : int = 5
  D = H * hd
input:
  idx : Tensor([B, T], int64)
  mem : Tensor([B, S, D], float32)
parameter:
  emb : Tensor([V, D], float32)
  head : Tensor([V, D], float32)
output:
  logits : Tensor([B, T, V], float32)
  h : Tensor([B, T, D], float32)
let x = gather(emb, idx)
let q = reshape(x, [B, T, H, hd])
let kv = reshape(mem, [B, S, H, hd])
let a = flash_attention(q, q, q, causal=True)
let h = reshape(a, [B, T, D]) + flash_attention(q, kv, kv)[:, :, 0, 0:1]
let logits = linear(h, weight=head)
""", int_high={"idx": "V"}),
    _f("int-targets", "soundness", "(property) cross_entropy accepts int32 targets; torch wants int64", """
param:
  V : int = 5
  D : int = 2
parameter:
  emb : Tensor([V, D], float32)
input:
  idx : Tensor([B, T], int64)
  targets : Tensor([B, T], int32)
output:
  loss : Tensor([], float32)
let loss = cross_entropy(linear(gather(emb, idx), weight=emb), targets)
""", int_high={"idx": "V", "targets": "V"}),
    _f("per-layer-write-late", "codegen", "(property) buf[l] = h stores h's value at the end of the layer, not at the write", """
param:
  n_layer : int = 2
  D : int = 4
input:
  x : Tensor([B, D], float32)
output:
  buf : Tensor([n_layer, B, D], float32)
let buf = full([n_layer, B, D], 0.0, float32)
for l in 0..n_layer-1:
    let h = x * 1.0
    buf[l] = h
    h = h * 2.0
"""),
    _f("check-under-guard", "codegen", "(property) a run-time check that arose under `if past exists` ran when "
       "past was absent (its dims 0) and refused valid inputs", """
param:
  n_layer : int = 2
  D : int = 4
input:
  x : Tensor([B, D], float32)
  past : Tensor([S, B, D], float32)?
output:
  y : Tensor([B, D], float32)
let y = x
for l in 0..n_layer-1:
    y = y + past[l] if past exists else y * 2.0
""", domains={"S": [2, 3]}),
    _f("write-through-passthrough", "codegen", "(property) a write to a dropout of an input was done in place; "
       "outside training dropout returns its input, which the write then changed", """
input:
  x : Tensor([B, D], float32)
output:
  y : Tensor([B, D], float32)
  z : Tensor([B, D], float32)
let y = x * 1.0
let z = dropout(x, rate=0.0)
z[:] = full([B, D], 0.0, float32)
"""),
    _f("write-through-cast", "codegen", "(property) a cast to the dtype a value has is that value; a write to "
       "it must not change the input", """
input:
  x : Tensor([B, D], float32)
output:
  y : Tensor([B, D], float32)
  z : Tensor([B, D], float32)
let y = x * 1.0
let z = cast(x, float32)
z[0] = full([D], 0.0, float32)
"""),
    _f("int-buffer-init", "codegen", "(property) an integer buffer without an initialiser got `normal`, which "
       "torch cannot draw into an int64 tensor: Model() crashed", """
param:
  D : int = 4
  V : int = 5
input:
  idx : Tensor([B, T], int64)
buffer:
  table : Tensor([V, D], int64)
output:
  y : Tensor([B, T, D], int64)
let y = gather(table, idx)
"""),
    _f("cache-written-twice", "codegen", "(property) a cache output written twice per layer, beside attention no "
       "output needs: the block read its batch size from the cache (None without use_cache, a list of "
       "buffers in generate), ran the dead attention on keys computed only for the cache, and generate "
       "planned buffers for a write the caller could not do", """
param:
  n_layer : int = 2
  H : int = 1
  hd : int = 4
  V : int = 7
  max_len : int = 10
  D = H * hd
input:
  idx : Tensor([B, T], int64)
  past_keys : Tensor([n_layer, B, T_past, H, hd], float32)?
  past_values : Tensor([n_layer, B, T_past, H, hd], float32)?
parameter:
  emb : Tensor([V, D], float32)
  wq : Tensor([n_layer, D, D], float32)
  wk : Tensor([D, D], float32)
  wv : Tensor([n_layer, D, D], float32)
  head : Tensor([V, D], float32)
output:
  logits : Tensor([B, T, V], float32)
  new_keys : Tensor([n_layer, B, T + T_past, H, hd], float32)
  new_values : Tensor([n_layer, B, T + T_past, H, hd], float32)
assert T + T_past <= max_len
let x = gather(emb, idx)
let new_keys = full([n_layer, B, T + T_past, H, hd], 0.0, float32)
let new_values = full([n_layer, B, T + T_past, H, hd], 0.0, float32)
for i in 0..n_layer-1:
    let q = reshape(linear(x, wq[i]), [B, T, H, hd])
    let k = reshape(linear(x, wk), [B, T, H, hd])
    let v = reshape(linear(x, wv[i]), [B, T, H, hd])
    let kk = concat([past_keys[i], k], axis=1) if past_keys exists else k
    new_keys[i] = kk
    let vv = concat([past_values[i], v], axis=1) if past_values exists else v
    new_values[i] = vv
    let a = flash_attention(q, kk, vv, causal=True)
    new_keys[i] = kk
    x = x + x
let logits = linear(x, weight=head)
"""),
    _f("write-reads-itself", "codegen", "a write whose value reads the written tensor (`y[:, 1:] = y[:, :-1]`) was "
       "done in place: torch refuses the overlap, and the spec means the old values", """
param:
  D : int = 4
input:
  x : Tensor([B, D], float32)
output:
  y : Tensor([B, D], float32)
let y = x * 2.0
y[:, 1:] = y[:, :-1]
"""),
    _f("tanh-of-a-number", "codegen", "`tanh` of a config number lowered to torch.tanh(<float>), a TypeError", """
param:
  D : int = 4
  a : float = 0.5
input:
  x : Tensor([B, D], float32)
output:
  y : Tensor([B, D], float32)
let y = x * tanh(a)
"""),
    _f("write-through-view", "codegen", "(property) y[0] = ... also changes a value read earlier as y[0] (a view)", """
param:
  D : int = 4
input:
  x : Tensor([D], float32)
output:
  v : Tensor([D], float32)
let y = full([2, D], 0.0, float32)
let v = y[0]
y[0] = x
"""),
    _f("write-through-alias", "codegen", "(property) let a = x; a[0] = ... writes into the caller's input x", """
param:
  D : int = 4
input:
  x : Tensor([2, D], float32)
output:
  y : Tensor([2, D], float32)
let a = x
a[0] = full([D], 0.0, float32)
let y = x + 1.0
"""),
    _f("static-cache-reassigned", "codegen", "(property) generate crashes when the cache value is re-assigned before the loop", """
param:
  n_layer : int = 1
  H : int = 1
  hd : int = 2
  V : int = 5
  max_len : int = 8
  D = H * hd
input:
  idx : Tensor([B, T], int64)
  past_keys : Tensor([n_layer, B, T_past, H, hd], float32)?
parameter:
  emb : Tensor([V, D], float32)
  pos : Tensor([max_len, D], float32)
  g : Tensor([hd], float32)
  wq : Tensor([n_layer, D, D], float32)
  wk : Tensor([n_layer, D, D], float32)
  head : Tensor([V, D], float32)
output:
  logits : Tensor([B, T, V], float32)
  new_keys : Tensor([n_layer, B, T_past + T, H, hd], float32)
let x = gather(emb, idx) + pos[T_past:T_past + T, :]
let new_keys = full([n_layer, B, T_past + T, H, hd], 0.0, float32)
new_keys = rms_norm(new_keys, weight=g)
for l in 0..n_layer-1:
    let q = reshape(linear(x, wq[l]), [B, T, H, hd])
    let k = reshape(linear(x, wk[l]), [B, T, H, hd])
    let kk = concat([past_keys[l], k], axis=1) if past_keys exists else k
    new_keys[l] = kk
    let a = flash_attention(q, kk, kk, causal=True)
    x = x + reshape(a, [B, T, D])
let logits = linear(x, weight=head)
""", int_high={"idx": "V"}),
    # ------------------------------------------------------------------ issue 18: config values
    _f("config-divisor-zero", "soundness", "Config(H=0) raised ZeroDivisionError in its own divisibility check", """
param:
  D : int = 8
  H : int = 2
  hd = D // H
input:
  x : Tensor([B, T, D], float32)
output:
  y : Tensor([B, T, H, hd], float32)
let y = reshape(x, [B, T, H, hd])
""", domains={"H": [0, 2], "D": [8, 6]}),
    _f("config-numbers", "soundness", "an initialiser's std and a dropout rate were checked for the defaults only; "
       "a negative size field was accepted", """
param:
  D : int = 4
  n_head : int = 2
  p : float = 0.1
input:
  x : Tensor([B, D], float32)
parameter:
  w : Tensor([D, D], float32) = normal(std=1.0 / (D - 3))
  v : Tensor([n_head, D], float32)
output:
  y : Tensor([B, D], float32)
  z : Tensor([B, n_head], float32)
let y = dropout(linear(x, weight=w), rate=p)
let z = linear(x, weight=v)
""", domains={"D": [2, 3, 4], "p": [1.5, -0.5, 0.25], "n_head": [-2, 0, 1]}),
]

BY_ID = {f.id: f for f in FINDINGS}
assert len(BY_ID) == len(FINDINGS)
