"""The session property (issue 18): what `snfc check` approves runs on the default path (torch.compile
on) for a whole session of ordinary calls, not only a handful (session.py says what a session is).

* every spec in specs/ runs a session, compiled (a test each);
* a 30-call varied session of nanoGPT keeps the documented number of graphs (docs/language.md 10);
* a fixed-seed sample of random specs (specgen.py) runs sessions; `SNF_SESSION_LONG=1` runs at
  least 2,000 and prints a summary line;
* on CUDA (skipped without one) the specs' sessions run there too.

A failure prints the spec and the call that broke: keep it as a regression test.
"""

from __future__ import annotations

import dataclasses
import inspect
import linecache
import os
import subprocess
import sys
import time

import pytest
import torch

try:
    import transformers
except ImportError:  # the transformers comparisons skip
    transformers = None

import runner
import session
from snf.runtime import experts
from conftest import REPO
from specs_table import HINTS, ROWS, SPECS, compiled_whole, kind
from specs_table import family as family_of

LONG = os.environ.get("SNF_SESSION_LONG") == "1"
# long mode's first seed and count: a long run may be split into several (their summary lines add up)
SEED0, COUNT = int(os.environ.get("SNF_SESSION_SEED0", "0")), int(os.environ.get("SNF_SESSION_COUNT", "2000"))
# the graphs each compiled function may keep after a spec's session: per block, one per
# combination of "cache given or not" and each run-time size being 1 or more, in float32, in
# bfloat16 and under autocast; the decode step one per batch class (1, or more) and cache bucket
BOUNDS = {"Block.forward": 3 * 12, "Model.forward": 8}


@pytest.fixture
def compiled(monkeypatch):
    monkeypatch.setenv("SNF_COMPILE", "1")
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _session(name: str, seed: int = 0, **options) -> session.SessionOutcome:
    text = (REPO / "specs" / f"{name}.snf").read_text(encoding="utf-8")
    return session.run_session(text, HINTS, seed, config=options.pop("config", ROWS[name].small), **options)


def _family(name: str):
    """The transformers family whose checkpoints snf.from_pretrained loads with this spec, or None (an
    encoder-decoder's session runs at its small config: tests/test_t5.py's compiled test compares
    it with transformers, at its family config its session would compile more than that test does)."""
    if transformers is None or kind(name) == "seq2seq":
        return None
    return family_of(name)


def _against_transformers(name: str, family: str, folder):
    """The session's config, read from the family's transformers config by the spec's `config hf:`
    section (as snf.from_pretrained reads config.json), and what to run after the session: the
    compiled model, given the transformers model's weights through the spec's `checkpoint hf:`
    mapping, against transformers. The forward on the session's units (compiled per block where the
    session compiles every unit; logits, BERT's hidden states) and the default `generate` (greedy, its
    decode steps compiled) token for token. This is what tests/test_from_pretrained.py checks eagerly;
    here it reuses the session's compiled graphs."""
    import importlib
    import warnings

    from test_from_pretrained import _close, hf_model, tokens
    from test_generate_stops import PADDING_DIFFERS, _padded_batch

    from snf.interop import load_checkpoint
    from snf.pretrained import config_from_hf
    # each kind of layer compiles its own block graphs, so a session runs one layer of each
    # (the row's session_hf): a second one would add nothing but a larger decode step
    hf = hf_model(family, **ROWS[name].session_hf)
    hf.save_pretrained(folder)  # the files from_pretrained reads (transformers 5 fuses experts in memory only)
    config = dataclasses.asdict(config_from_hf(importlib.import_module(f"generated.{name}"), hf.config.to_dict()))
    seen = {}

    def after(model):
        load_checkpoint(model, folder, "hf")
        model.eval()
        idx = tokens(hf.config.vocab_size).to(next(model.parameters()).device)
        causal = kind(name) == "causal"
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # a fallback to eager fails here
            want = hf(idx.cpu()).logits if causal else hf(idx.cpu()).last_hidden_state
            got = (model(idx).logits if causal else model(idx).last_hidden_state).cpu()
            seen["forward"] = (got - want).abs().max().item()
            assert _close(got, want), (family, seen["forward"])
            if causal:
                prompt = idx[:, :5]
                mine = model.generate(prompt, 6, temperature=0).cpu()
                theirs = hf.generate(prompt.cpu(), max_new_tokens=6, do_sample=False, pad_token_id=0)
                assert torch.equal(mine, theirs), (family, mine.tolist(), theirs.tolist())
                seen["generate"] = "equal"
                if family not in PADDING_DIFFERS:  # a left-padded batch with an end token, on the same graphs
                    # (two rows of each length: decode steps of a batch above 1, as those compiled above)
                    ids, mask, _ = _padded_batch(hf.config.vocab_size, lengths=(7, 7, 4, 4))
                    eos = int(theirs[0, 7])
                    mine = model.generate(input_ids=ids.to(idx.device), attention_mask=mask.to(idx.device),
                                          max_new_tokens=6, do_sample=False, eos_token_id=eos, pad_token_id=0).cpu()
                    theirs = hf.generate(ids, attention_mask=mask, max_new_tokens=6, do_sample=False,
                                         eos_token_id=eos, pad_token_id=0)
                    assert torch.equal(mine, theirs), (family, mine.tolist(), theirs.tolist())
                    seen["generate"] = "equal, padded with an end token too"
    return config, after, seen


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
DEVICES = ["cpu", pytest.param("cuda", marks=CUDA)]


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch internals, while compiling
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", [n if ROWS[n].fast else pytest.param(n, marks=pytest.mark.slow) for n in SPECS])
def test_every_spec_survives_a_session(name, device, compiled, capsys, monkeypatch, tmp_path):
    """Each spec, at its row's config (tests/specs_table.py): varied eval calls with and without
    caches, training steps, eval again (at the first call's sizes), generate at two batch sizes (a
    family's at batch 2, which its transformers comparison reuses), a bfloat16 cast and autocast;
    compiled against eager.

    What compiles on the CPU: for every spec, what a user's run compiles by default there,
    `generate`'s decode steps; for the specs of specs_table.compiled_whole(), which between them hold
    every construct of every spec (each op with its options, each kind of model), also what CUDA's
    default compiles, a training step whole, traced as CUDA's compile traces it and run unlowered
    (session._as_cuda_traces: inductor's C++ for it is no device's default); for the fast row's spec
    (nanoGPT's), also the bfloat16 cast's generate (the random specs' sessions compile their casts'
    generate too; the other specs' bfloat16 generate runs eagerly on the CPU: docs/ci.md says why). The eval forward
    compiled per block, a unit users may choose and no device's default, compiles in the 30 varied
    calls below (nanoGPT's) and the random specs' sessions
    (which compile the casts' forwards and autocast too: all_casts). On CUDA every unit compiles for
    every spec, and a decode step is a CUDA graph (`reduce-overhead`).

    A spec snf.from_pretrained loads for a transformers family runs at that family's test config and
    then, on the same model, against transformers (_against_transformers); a row with `sparse_experts`
    (Mixtral's) runs the sparse experts op. One test a spec, so that test workers share them out."""
    start = time.time()
    family = _family(name)
    options, seen = {}, {}
    if family is not None:  # a bundled transformers family: its config, and its logits and tokens after
        config, after, seen = _against_transformers(name, family, tmp_path / family)
        # generate at batch 2 alone, whose decode graphs the comparison's batches of 2 then reuse (a batch
        # size's own graphs are the runtime's, which the other specs' sessions and the random ones vary)
        options = dict(config=config, after=after, batches=(2,))
    if ROWS[name].sparse_experts:  # the sparse experts op inside the compiled graphs, even at these sizes
        monkeypatch.setattr(experts, "_MOE_DENSE_MACS", -1)
    whole = device == "cuda" or name in compiled_whole()
    out = _session(name, calls=4, whole_training=whole, eval_blocks=device == "cuda", device=device,
                   all_casts=False, cast_generate_compiled=device == "cuda" or ROWS[name].fast, **options)
    assert out.accepted and out.calls >= 4, (name, out)
    assert family is None or seen, (name, "the transformers comparison did not run")
    for unit, count in out.graphs.items():
        assert count <= BOUNDS[unit.split(".")[0].rstrip("0123456789") + ".forward"], (name, out.graphs)
    versus = f"  vs transformers' {family}: max |diff| {seen['forward']:.1e}, generate {seen.get('generate', '-')}" \
        if seen else ""
    with capsys.disabled():
        print(f"\n{name:18} {device:4} {out.calls:3} calls  {out.graphs}  {time.time() - start:.0f} s{versus}")


# The 30-call session of docs/language.md section 10: nanoGPT at a small config, eval mode, batch
# 1-3, 1-5 new tokens, caches of 0-5 tokens (issue 18's own session, which broke at call 23).
def thirty_calls(model, seed: int = 0) -> None:
    import random
    rng = random.Random(seed)
    vocab, device = model.config.vocab_size, next(model.parameters()).device
    with torch.no_grad():
        for _ in range(30):
            b, t, past = rng.randint(1, 3), rng.randint(1, 5), rng.randint(0, 5)
            idx = torch.randint(0, vocab, (b, t), device=device)
            if past:
                cache = model(torch.randint(0, vocab, (b, past), device=device), use_cache=True)
                model(idx, past_keys=cache.new_keys, past_values=cache.new_values)
            else:
                model(idx)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("device", DEVICES)
def test_a_varied_session_keeps_a_bounded_number_of_graphs(device, compiled, capsys):
    """The figures docs/language.md section 10 states: 10 graphs per block for these 30 varied eval
    calls, and never more than 12 however long the session runs (a cache given or not, times
    batch, length and cache length each 1 or more), with no fallback to eager; on either device."""
    import warnings

    from conftest import fresh_module
    ng = fresh_module(REPO / "generated" / "nanogpt.py", f"nanogpt_thirty_calls_{device}")
    torch.manual_seed(0)
    model = ng.Model(**ROWS["nanogpt"].small).to(device).eval()
    model.compile_units = {device: {"train": "none", "eval": "block"}}  # not a default: eval compiled per block
    start = time.time()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # a fallback to eager fails here
        thirty_calls(model)
        first = session.graph_counts(ng)
        for seed in range(1, 4):  # ninety more, other sizes
            thirty_calls(model, seed=seed)
    after = session.graph_counts(ng)
    with capsys.disabled():
        print(f"\n{device}: 30 varied calls: {first}; after 120: {after}; {time.time() - start:.0f} s")
    assert first == {"Block.forward": 10}
    assert after["Block.forward"] <= 12


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_random_specs_survive_sessions(compiled, capsys):
    stats = session.new_stats()
    start = time.time()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: one thread is faster on a shared CPU
    seed0 = SEED0 if LONG else 0

    def failure(report: str) -> None:  # shown as it happens, past pytest's capture
        with capsys.disabled():
            print(report, file=sys.stderr, flush=True)

    def progress(seed: int) -> None:
        with capsys.disabled():
            print(f"\n{stats['sessions']} sessions, seeds {seed0}..{seed}, {stats['failures']} failures, "
                  f"{time.time() - start:.0f} s", flush=True)
    try:
        session.random_sessions(COUNT if LONG else 2, stats, seed0, progress, keep_going=LONG, report_failure=failure)
    finally:
        torch.set_num_threads(threads)
        with capsys.disabled():
            print("\n" + session.summary_line(stats, seed0, time.time() - start))
    assert stats["failures"] == 0
    assert stats["graphs"] > 0  # the sessions compiled, and graph_counts found what they compiled


def test_a_session_loads_its_module_with_its_source_in_linecache():
    """As snf.load does: tracebacks show the generated lines, and torch 2.11's dynamo keeps a
    function's graphs on its code object (where graph_counts reads them) only when it finds the
    source; without it a session of random specs counted 0 graphs there."""
    text = (REPO / "specs" / "nanogpt.snf").read_text()
    module = runner.load_module(runner.checked(text), "linecache")
    where = inspect.unwrap(module.Block.forward).__code__.co_filename
    assert "".join(linecache.getlines(where)) == module.__snf_source__
    runner.unload(module)
    assert where not in linecache.cache


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_long_mode_findings_stay_fixed(compiled):
    """Seeds the long mode broke on, replayed. Seed 30: `min` over an axis of a bfloat16 model,
    trained compiled whole, gave NaN gradients (inductor's amin backward in bfloat16); `max` and
    `min` now lower to torch.max/min(...).values. Seed 363: a write into a softmax's result was done
    in place, which autograd's backward refuses (it keeps the result); such a write now copies first.
    Seed 8303: a float32 model's float16 values concatenated under CPU bfloat16 autocast, whose rule
    for torch.cat refuses float16; concat, rope and cache updates of a half dtype now step out of
    autocast where it would refuse them (snf.runtime.writes._autocast_refuses). Seed 11104:
    `top_k_indices` of equal scores, where torch.topk's order differs from the reference's (the
    lower index first); it now lowers to a stable sort. Seed 28826: see the test below. Seed 51243 was
    the generator's: see test_property.py's test_the_generator_divides_only_by_values_away_from_0.
    Seed 30's was inductor's lowering, so the training compiled whole is lowered here, as CUDA's is."""
    for seed in (30, 363, 8303, 11104):  # 28826: the cold-cache replay below (twice would compile it twice)
        stats = session.new_stats()
        session.random_sessions(1, stats, seed0=seed, lower_whole_training=True)
        assert stats["sessions"] == 1 and stats["failures"] == 0, (seed, stats)


@pytest.mark.slow
def test_a_block_handed_a_view_of_its_other_argument_compiles_on_a_cold_cache(tmp_path):
    """Long-mode seed 28826: a block handed `x` and `v3 = x[:, 0]` (a view of it) made dynamo fail to
    build its shape guards ("sources must not be empty for symbol s5"), and the block ran eagerly
    from then on. It failed only where dynamo met the symbols in one order: under PYTHONHASHSEED=2
    with an empty inductor cache, every time (a warm cache or another hash seed hid it, so the test
    above alone would not catch it). Such an argument is now copied (compiling._unaliased)."""
    replay = ("import torch; torch.set_num_threads(1); import specgen, session; "
              "s = specgen.build(specgen.RandomChooser(28826)); print(session.run_session(s.text, s, 28826, calls=6))")
    env = {**os.environ, "PYTHONHASHSEED": "2", "TORCHINDUCTOR_CACHE_DIR": str(tmp_path), "SNF_COMPILE": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests" / "property")])}
    done = subprocess.run([sys.executable, "-c", replay], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and "accepted=True" in done.stdout, done.stdout + done.stderr[-3000:]
