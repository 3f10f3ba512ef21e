"""Run by tests/test_tensor_parallel.py under torchrun (gloo, CPU): every model's tensor-parallel checks
in one launch. Each rank builds the same model (same seed), shards a copy with snf.parallelize and
compares it with the whole model run in this process. Rank 0 writes the numbers as JSON to OUT.

usage: python -m torch.distributed.run --standalone --nproc_per_node N tests/tensor_parallel_worker.py OUT.json

SNF_TP_CASES=llama3,from_pretrained (names of CASES, "from_pretrained", "fsdp2_tp") runs only those.

N = 2: the checks at tp = 2. N = 4: the same checks on each half of a 2 x 2 ("dp", "tp") mesh, then
FSDP2 over "dp" x tensor parallel over "tp": 3 AdamW steps with gradient clipping against the same
steps of one process on the whole batch.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import json
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import snf  # noqa: E402
from snf.parallel import _pieces_order, sharded_like, whole_tensor  # noqa: E402
from specs_table import ROWS  # noqa: E402

# The plans are the generated modules' own (Model.tp_plan, derived from the specs).

TINY = dict(block_size=32, n_layer=2, n_head=4, n_kv_head=2, n_embd=32)
CASES = {  # name -> (spec, config)
    # (rope_original_max_position = block_size: a config save_pretrained writes back as it is)
    "llama3": ("llama3", dict(TINY, vocab_size=64, mlp_hidden=48, rope_scaling=0, rope_original_max_position=32)),
    "llama3_tied": ("llama3", dict(TINY, vocab_size=64, mlp_hidden=48, rope_scaling=0, tie_embeddings=True)),
    "llama3_odd_vocab": ("llama3", dict(TINY, vocab_size=61, mlp_hidden=48, rope_scaling=0,
                                        rope_original_max_position=32)),
    "qwen3": ("qwen3", dict(TINY, vocab_size=64, mlp_hidden=48, head_dim=8, tie_embeddings=False)),
    "mixtral": ("mixtral", dict(block_size=32, n_layer=2, n_head=4, n_kv_head=2, n_embd=32, vocab_size=64,
                                mlp_hidden=24, n_expert=4, n_expert_tok=2)),
    # fused q/k/v and gate/up sliced into pieces (tp_pieces: each rank holds its part of each)
    "phi3": ("phi3", ROWS["phi3"].small),
    # attention sinks sharded by heads (shard:0), experts with biases (the down bias added once)
    "gpt_oss": ("gpt_oss", ROWS["gpt_oss"].small),
    # sequence parallel (SEQUENCE): the norms on a rank's positions, untied and tied
    "llama3_sp": ("llama3", dict(TINY, vocab_size=64, mlp_hidden=48, rope_scaling=0, n_layer=1)),
    "llama3_tied_sp": ("llama3", dict(TINY, vocab_size=64, mlp_hidden=48, rope_scaling=0, n_layer=1,
                                      tie_embeddings=True)),
    # q and k normalised over their whole width (width_norm: the statistics all-reduced), a tied head
    "olmo2": ("olmo2", dict(ROWS["olmo2"].small, n_layer=1)),
    # recurrent states: in_proj in pieces of pieces (z, x B C, dt; x, B, C), the conv weight and state in pieces
    "mamba2": ("mamba2", ROWS["mamba2"].small),
    # a hybrid: gated attention, the gated delta rule (q, k, v concatenated: the conv's pieces), experts
    "qwen3_next": ("qwen3_next", ROWS["qwen3_next"].small),
    # a head that is always the token table (`linear(x, weight=wte)`, no lm_head): the table kept whole,
    # without and with sequence parallelism (its final norm's output gathered before the head)
    "gpt_decoder": ("gpt_decoder", dict(ROWS["gpt_decoder"].small, n_layer=1)),
    "gpt_decoder_sp": ("gpt_decoder", dict(ROWS["gpt_decoder"].small, n_layer=1)),
}
SEQUENCE = {"llama3_sp", "llama3_tied_sp", "gpt_decoder_sp"}  # parallelized with sequence_parallel=True


def _local(t):
    return t.to_local() if hasattr(t, "to_local") else t


def diff(a, b) -> float:
    return (a.float() - b.float()).abs().max().item() if a.numel() else 0.0


def mine(model, name: str, whole, local, rank: int, tp: int):
    """This rank's part of the whole model's cache `name`: along the axis where `local` is 1/tp of it,
    its heads, or its part of each piece where the model's `tp_pieces` names the cache."""
    if not isinstance(whole, torch.Tensor) or whole.shape == local.shape:
        return whole
    axis = next(a for a, (w, m) in enumerate(zip(whole.shape, local.shape)) if w != m)
    pieces = getattr(type(model), "tp_pieces", {})
    if name in pieces:
        whole = whole.index_select(axis, _pieces_order(pieces[name](model.config), tp))
    return whole.narrow(axis, rank * local.shape[axis], local.shape[axis])


def built(name: str):
    """The whole model of the case `name` (the same on every rank) and its config's values."""
    spec, cfg = CASES[name]
    mod = importlib.import_module(f"generated.{spec}")
    torch.manual_seed(0)
    whole = mod.Model(mod.Config(**cfg)).eval()
    with torch.no_grad():  # off the initial values (zero biases, unit norms), so that each one counts
        for p in whole.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return whole, cfg


def check(name: str, mesh) -> dict:
    whole, cfg = built(name)
    sequence = name in SEQUENCE
    sharded = snf.parallelize(copy.deepcopy(whole), mesh, sequence_parallel=sequence)
    rank, tp = mesh.get_local_rank(), mesh.size()
    # split by positions, a length tp divides
    idx = torch.randint(0, cfg["vocab_size"], (2, 8 if sequence else 7), generator=torch.Generator().manual_seed(1))
    out, ref = sharded(idx, use_cache=True), whole(idx, use_cache=True)
    res = {"logits": diff(out.logits, ref.logits), "caches": 0.0}
    for field in ref._fields[1:]:  # each cache (or other output): this rank's part of the whole one
        if getattr(ref, field) is None:  # an output this call does not ask for (a loss without labels)
            assert getattr(out, field) is None, field
            continue
        res["caches"] = max(res["caches"], diff(getattr(out, field), mine(whole, field, getattr(ref, field),
                                                                          getattr(out, field), rank, tp)))
    if sequence:  # refused: a decode step's one position does not split
        try:
            sharded.generate(idx, max_new_tokens=2, temperature=0)
            res["generate_refused"] = False
        except snf.parallel.ShardingError as e:
            res["generate_refused"] = "a length of 1 does not divide by 2" in str(e)
    else:
        want = whole.generate(idx, max_new_tokens=6, temperature=0)
        res["generate_same"] = bool(torch.equal(sharded.generate(idx, max_new_tokens=6, temperature=0), want))
    if name == "llama3":  # the default path's decode step, compiled, on the sharded weights
        res["compiled_generate_same"] = bool(torch.equal(
            sharded.generate(idx, max_new_tokens=6, temperature=0, compile=True), want))
        # cast as users cast: bfloat16 DTensors against the whole model cast, relative to the largest logit
        half, ref_half = copy.deepcopy(sharded).to(torch.bfloat16), copy.deepcopy(whole).to(torch.bfloat16)
        want_half = ref_half(idx).logits.float()
        res["bf16_logits"] = diff(half(idx).logits, want_half) / want_half.abs().max().item()
    # gradients of the same loss, gathered
    sharded.train(), whole.train()
    for m in (sharded, whole):
        logits = m(idx, use_cache=False).logits
        torch.nn.functional.cross_entropy(logits.flatten(0, 1), idx.flatten()).backward()
    grads = dict(whole.named_parameters())
    worst = 0.0
    for n, p in sharded.named_parameters():
        worst = max(worst, diff(whole_tensor(sharded, n, p.grad), grads[n].grad))
    res["grads"] = worst
    # the gathered parameters (a projection of pieces' rows put back in order): the whole model's
    whole_params = dict(whole.named_parameters())
    res["params"] = max(diff(whole_tensor(sharded, n, p.detach()), whole_params[n])
                        for n, p in sharded.named_parameters())
    # and back: the whole model's tensors laid out as this rank's (a checkpoint's weights and moments, resumed)
    res["params_back"] = max(diff(_local(sharded_like(sharded, n, whole_params[n].detach(), p)), _local(p.detach()))
                             for n, p in sharded.named_parameters())
    # bytes: the fullest rank holds at most 1/tp of each sharded tensor (its sharded axis rounded up:
    # an uneven vocabulary gives the first ranks one row more) plus the replicated ones
    local, bound = 0, 0
    for p in sharded.parameters():
        if isinstance(p, DTensor) and p.placements[0].is_shard():
            local += p.to_local().nbytes
            axis = p.placements[0].dim
            bound += -(-p.shape[axis] // tp) * (p.numel() // p.shape[axis]) * p.element_size()
        else:  # a plain tensor, or a Replicate DTensor (a per-head norm's weight)
            local += p.nbytes
            bound += p.nbytes
    fullest = torch.tensor(local)
    dist.all_reduce(fullest, op=dist.ReduceOp.MAX, group=mesh.get_group())
    res["bytes"] = [fullest.item(), bound, sum(p.nbytes for p in whole.parameters())]
    return res


# sharded loading: plain weights, a vocabulary split unevenly (llama3_odd_vocab); pieces (phi3);
# experts read through `.T` and interleaved keys, and sinks (gpt_oss); pieces of pieces, and a
# convolution weight in pieces along its shard:0 axis (mamba2)
LOADED = ("llama3_odd_vocab", "phi3", "gpt_oss", "mamba2")


@contextlib.contextmanager
def _bytes_read():
    """The bytes this process reads of safetensors files meanwhile: a tensor read whole (`[key]`,
    `read_into`, `mapped`), or a part of one (`part`)."""
    from snf.checkpoint_files import SafetensorsFile
    count = [0]

    def whole(f):
        def counted(self, key, *args):
            out = f(self, key, *args)
            if out is not None and out is not False:
                _, _, begin, end = self._entries[key]
                count[0] += end - begin
            return out
        return counted

    def part(self, key, index):
        out = saved["part"](self, key, index)
        count[0] += out.nbytes
        return out
    saved = {n: getattr(SafetensorsFile, n) for n in ("__getitem__", "read_into", "mapped", "part")}
    for n in ("__getitem__", "read_into", "mapped"):
        setattr(SafetensorsFile, n, whole(saved[n]))
    SafetensorsFile.part = part
    try:
        yield count
    finally:
        for n, f in saved.items():
            setattr(SafetensorsFile, n, f)


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def from_folder(mesh, root: str) -> dict:
    """snf.from_pretrained(folder, device_mesh=mesh) of a folder rank 0 saved, against snf.parallelize
    of a plain load: logits, every local shard bit-equal, the bytes each rank read of the files (at
    most what it holds). Then save_pretrained of the sharded model (rank 0 writes the whole model),
    loaded in one process; and a save that fails leaves the folder as it was."""
    from snf.pretrained import PretrainedError
    res = {"logits": 0.0, "sharded": True, "shards_equal": True, "read_at_most_held": True, "bytes": {},
           "saved_logits": 0.0, "saved_same": True, "failed_save_kept": True}
    rank = dist.get_rank()
    for name in LOADED:
        whole, cfg = built(name)
        folder, saved = os.path.join(root, f"{name}-saved"), os.path.join(root, f"{name}-from-tp")
        try:
            if rank == 0:
                snf.save_pretrained(whole, folder)
        finally:
            dist.barrier()  # every rank, even where the save failed: no rank waits alone
        with _bytes_read() as read:
            model = snf.from_pretrained(folder, device_mesh=mesh)
        plain = snf.parallelize(snf.from_pretrained(folder), mesh)
        idx = torch.randint(0, cfg["vocab_size"], (2, 7), generator=torch.Generator().manual_seed(1))
        logits = model(idx).logits
        res["logits"] = max(res["logits"], diff(logits, whole(idx).logits), diff(logits, plain(idx).logits))
        res["sharded"] &= any(isinstance(p, DTensor) for p in model.parameters())
        mine, theirs = dict(model.named_parameters()), dict(plain.named_parameters())
        res["shards_equal"] &= mine.keys() == theirs.keys() and all(
            type(p) is type(theirs[n]) and getattr(p, "placements", None) == getattr(theirs[n], "placements", None)
            and torch.equal(_local(p), _local(theirs[n])) for n, p in mine.items())
        held = sum(_local(p).nbytes for p in model.parameters())
        res["read_at_most_held"] &= read[0] <= held
        res["bytes"][name] = [read[0], held, sum(p.nbytes for p in whole.parameters())]  # rank 0's
        # saved from tp = 2 (every rank gathers, rank 0 writes), loaded whole in one process
        snf.save_pretrained(model, saved)
        back = snf.from_pretrained(saved)
        res["saved_logits"] = max(res["saved_logits"], diff(back(idx).logits, whole(idx).logits))
        # the same files as the whole model's save: config.json and every weight, bit for bit
        res["saved_same"] &= all(_read(os.path.join(saved, f)) == _read(os.path.join(folder, f))
                                 for f in ("config.json", "model.safetensors"))
    # a save that fails while writing (a full disk) raises on every rank and leaves the folder as it was
    from snf import interop

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")
    write, interop.write_safetensors = interop.write_safetensors, full
    try:
        snf.save_pretrained(model, saved)
        res["failed_save_kept"] = False
    except PretrainedError:
        pass
    finally:
        interop.write_safetensors = write
    res["failed_save_kept"] &= diff(snf.from_pretrained(saved)(idx).logits, whole(idx).logits) <= 1e-5
    return res


def loss_of(model, tokens):
    logits = model(tokens[:, :-1], use_cache=False).logits
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())


def train(mesh, root: str) -> dict:
    """3 AdamW steps with clip_grad_norm_ on a ("dp", "tp") mesh: each dp group trains on its half
    of the batch; one process trains the whole model on the whole batch. Then saved (save_pretrained
    gathers it) and loaded back onto the mesh (from_pretrained: each rank reads its "tp" slice, FSDP2
    keeps its "dp" part)."""
    from snf.parallel import clip_grad_norm_
    spec, cfg = CASES["llama3"]
    mod = importlib.import_module(f"generated.{spec}")
    torch.manual_seed(0)
    whole = mod.Model(mod.Config(**cfg)).train()
    sharded = snf.parallelize(copy.deepcopy(whole), mesh)
    # eps 1e-6: Adam's step lr * g / (|g| + eps) turns rounding in a tiny gradient into a visible move
    # at the default 1e-8 (tests/test_distributed.py)
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-2, eps=1e-6, foreach=False) for m in (whole, sharded)]
    tokens = torch.randint(0, cfg["vocab_size"], (4, 9), generator=torch.Generator().manual_seed(2))
    dp = mesh["dp"]
    half = tokens.size(0) // dp.size()
    mine = tokens[dp.get_local_rank() * half:(dp.get_local_rank() + 1) * half]
    losses, values = [], []
    for _ in range(3):
        pair = []
        for model, batch, opt in ((whole, tokens, opts[0]), (sharded, mine, opts[1])):
            loss = loss_of(model, batch)
            loss.backward()
            clip_grad_norm_(model.parameters(), 0.05)  # small: every step clips
            opt.step()
            opt.zero_grad()
            pair.append(loss.detach())
        dist.all_reduce(pair[1], group=dp.get_group())  # the dp groups' halves: the whole batch's mean
        losses.append(abs(pair[0].item() - pair[1].item() / dp.size()))
        values.append(pair[0].item())
    state = {k: v.full_tensor() if isinstance(v, DTensor) else v for k, v in sharded.state_dict().items()}
    ref = whole.state_dict()
    plain = mod.Model(mod.Config(**cfg)).eval()
    plain.load_state_dict(state)
    idx = tokens[:, :-1]
    folder = os.path.join(root, "llama3-trained")
    snf.save_pretrained(sharded, folder)
    again = snf.from_pretrained(folder, device_mesh=mesh)
    return {"losses": max(losses), "loss_values": values, "params": max(diff(state[k], ref[k]) for k in ref),
            "loaded_logits": diff(plain(idx).logits, whole.eval()(idx).logits),
            "reloaded_logits": diff(again(idx).logits, whole(idx).logits)}


def _worst_over_ranks(results: dict) -> dict:
    """Each rank's results, the worst of every rank kept: the largest of each difference, any rank's
    error, False where any rank's check is False (rank 1 holds the other half of the heads)."""
    every = [None] * dist.get_world_size()
    dist.all_gather_object(every, results)
    out = {}
    for case in results:
        ran = [r[case] for r in every if case in r]  # the ranks that ran it (the tp = 2 cases: the first dp group)
        errors = [r["error"] for r in ran if "error" in r]
        if errors:
            out[case] = {"error": errors[0]}
            continue
        out[case] = {}
        for key, value in results[case].items():
            values = [r[key] for r in ran]
            if isinstance(value, bool):
                out[case][key] = all(values)
            elif isinstance(value, float):
                out[case][key] = max(values)
            else:  # lists (bytes per rank: each rank's own bound; losses as logged): rank 0's
                out[case][key] = value
    return out


def main() -> None:
    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    n = dist.get_world_size()
    # 4 processes: a 2 x 2 ("dp", "tp") mesh; the tp = 2 cases run on the first dp group's "tp" ranks
    # alone (the second would repeat them on the same 2 cores), sharded loading and saving (whose
    # barrier and broadcast are every rank's) and FSDP2 x TP on all four
    mesh = init_device_mesh("cpu", (n // 2, 2), mesh_dim_names=("dp", "tp")) if n == 4 else \
        init_device_mesh("cpu", (n,), mesh_dim_names=("tp",))
    tp = mesh["tp"] if n == 4 else mesh
    root = os.path.dirname(os.path.abspath(sys.argv[1]))
    first = n != 4 or mesh["dp"].get_local_rank() == 0
    runs = {name: (lambda name=name: check(name, tp)) for name in CASES} if first else {}
    runs["from_pretrained"] = lambda: from_folder(tp, root)
    if n == 4:
        runs["fsdp2_tp"] = lambda: train(mesh, root)
    # SNF_TP_CASES=olmo2,fsdp2_tp: only these (to iterate on a few); the test runs them all
    chosen = os.environ.get("SNF_TP_CASES")
    results = {}
    for name, run in runs.items():
        if chosen and name not in chosen.split(","):
            continue
        try:
            results[name] = run()
        except Exception as e:  # reported, so the test names the case that failed
            results[name] = {"error": f"{type(e).__name__}: {e}"}
    results = _worst_over_ranks(results)
    if dist.get_rank() == 0:
        with open(sys.argv[1], "w") as f:
            json.dump(results, f, indent=1)
    dist.destroy_process_group()
    # past the interpreter's teardown, where a gloo rank was seen to abort (SIGABRT) once in about ten
    # launches, every result already written: the launch's exit status is the checks', not torch's exit
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
