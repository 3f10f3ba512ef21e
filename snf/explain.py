"""Longer explanations with examples, for `snfc explain CODE`."""

EXAMPLES = {
    "bad-config-map": (
        "Example:\n"
        "    config hf:\n"
        "      assert hf.model_type == \"llama\"\n"
        "      n_layers <- hf.num_hidden_layers     # the field is `n_layer`\n"
        "      n_embd <- hf.hidden_size // n_head    # `n_head` is read below: not known yet\n"
        "      n_head <- hf.num_attention_heads\n"
        "A `config FMT:` section maps a foreign config (transformers' config.json) to the Config:\n"
        "`field <- source` reads a `param:` field (from keys `hf.key`, fields read above,\n"
        "constants), `assert` states what the spec requires, `_ <- hf.key` lists harmless keys and\n"
        "`hf.key <- value` what the way back writes. Every field without a default must be read.\n"
        "docs/language.md 7.1."),
    "shape-mismatch": (
        "Example:\n"
        "    parameter:\n"
        "      w : Tensor([D, 4*D], float32)\n"
        "    let h = linear(x, weight=w)      # x is [B, T, D]\n"
        "`linear` takes its weight as [out, in] (like torch.nn.Linear), so w must be [4*D, D].\n"
        "Shapes are compared symbolically: [B, T, D] and [B, T, 4*D] differ for every D > 0."),
    "optional-unguarded": (
        "Example:\n"
        "    input:\n"
        "      past : Tensor([B, H, T_past, hd], float32)?\n"
        "    let k = concat([past, k_new], axis=2)       # error: past may be absent\n"
        "Fix: `let k = concat([past, k_new], axis=2) if past exists else k_new`."),
    "stacked-index": (
        "A parameter declared [n_layer, ...] is per-layer: index it with the loop variable,\n"
        "`w[l]`, inside `for l in 0..n_layer-1:`."),
    "index-range": (
        "Example:\n"
        "    param:\n"
        "      n_layer : int = 3\n"
        "      k : int = 1\n"
        "    let buf = full([k, B, D], 0.0, float32)\n"
        "    for l in 0..n_layer-1:\n"
        "        y = y + buf[l]          # l runs to 2; buf has 1 row with the defaults\n"
        "An index or slice bound must lie within its axis. The checker proves it, or the module\n"
        "checks it (a Config check for params, a forward check for run-time sizes); when it fails\n"
        "for the default config, it is this error."),
    "bad-arithmetic": (
        "Example:\n"
        "    param:\n"
        "      d_ff : int = 4\n"
        "      s = sqrt(-8 * d_ff)      # the square root of -32 with the defaults\n"
        "Numbers in a spec (literals, and params at their defaults) are computed while checking,\n"
        "each step bounded first: division by zero, overflow, square roots and logarithms out of\n"
        "their domain and power towers are errors here. For any other config, Config checks\n"
        "that each number the module computes from it computes (docs/language.md 3.1)."),
    "bad-value": (
        "Example:\n"
        "    param:\n"
        "      p : float = 1.5\n"
        "    ...\n"
        "    x = dropout(x, rate=p)      # a dropout rate is a probability, in [0, 1]\n"
        "A number an op or initialiser takes must lie in the range it allows: a dropout rate in\n"
        "[0, 1], `normal`'s std >= 0, a positional base > 0. A constant is checked here, a number\n"
        "computed from config values for the defaults here and for any other config by Config."),
    "fixed-length": (
        "An input axis named after a param (T = block_size) fixes every input to that length.\n"
        "Use a fresh name for the sequence axis; `slice(pos, [0:T, :])` then adds a run-time check\n"
        "T <= block_size."),
}
