"""Longer explanations with examples, for `snfc explain CODE`."""

EXAMPLES = {
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
    "fixed-length": (
        "An input axis named after a param (T = block_size) fixes every input to that length.\n"
        "Use a fresh name for the sequence axis; `slice(pos, [0:T, :])` then adds a run-time check\n"
        "T <= block_size."),
}
