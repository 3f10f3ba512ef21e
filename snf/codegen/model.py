"""The generated file: `Config`, the Block classes, `Model` with its `forward` and `generate`, and
the tables `snf.interop` reads. Facts come from the typed IR and the plans; this only emits."""

from __future__ import annotations

import ast
import functools
import textwrap
from pathlib import PurePosixPath
from typing import NamedTuple

import jinja2

from .. import ir, runtime
from ..config_mapping import encode_sections
from ..dims import show_shape
from ..names import FORWARD_RESERVED, Namespace
from ..passes import Plans
from ..resources import resource_dir
from ..version import __version__
from . import blocks, config, params
from .emit import Emitter, names_in, reads
from .wrap import DATA_LIMIT, LIMIT, wrap

# Model.generate's own arguments, and its locals (templates/module.py.j2)
GENERATE_ARGS = ("max_new_tokens", "temperature", "top_k", "top_p", "generator", "compile", "attention_mask",
                 "eos_token_id", "pad_token_id", "transformers_args")
GENERATE_LOCALS = ("was_training", "out", "tokens", "position", "size", "step", "token", "done", "plan")


@functools.lru_cache(maxsize=None)
def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(resource_dir("templates"))),
        undefined=jinja2.StrictUndefined, keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True,
        autoescape=False)
    env.filters["pyrepr"] = repr
    return env


def _comment_text(text: str) -> str:
    """Spec text shown in a `#` comment: printable, one line, no way to end the comment."""
    return "".join(ch if ch.isprintable() else "?" for ch in text).strip()


def display_text(text: str) -> str:
    """A file or model name shown in comments, docstrings and f-string messages of generated code:
    printable, one line, and without quotes, backslashes or braces (which could end a docstring or
    open an f-string field)."""
    return "".join("?" if ch in "{}\\\"'" else ch for ch in _comment_text(text)) or "?"


class Generator:
    def __init__(self, plans: Plans, spec_path: str, standalone: bool = False):
        self.plans, self.model, self.spec_path = plans, plans.model, spec_path
        self.standalone = standalone  # the runtime copied in (needs only torch), not imported from snf
        m = self.model
        self.spec_file = display_text(PurePosixPath(spec_path.replace("\\", "/")).name)
        # the config values a dim may name: fields, and derived ints that no polynomial expresses
        self.config_fields = m.config_names()
        self.derived_alias, self.derived_by_dim = {}, {}
        for d in m.derived:
            if d.alias_of is not None and d.dim is not None:
                self.derived_alias[d.name] = d.dim
            elif d.dim is not None and not d.dim.is_const:
                self.derived_by_dim.setdefault(d.dim, d.name)
        self.runtime = m.run_time_dims
        self.display = dict(m.display)
        self.model_dtype = self._model_dtype()
        self.takes: dict[str, blocks.Takes] = {}  # what each Block's forward takes, by its attribute (render)

    # ---------------------------------------------------------------- small facts
    def show(self, shape) -> str:
        return show_shape(shape, self.display)

    def input_optional(self, name: str) -> bool:
        return any(i.name == name and i.optional for i in self.model.inputs)

    def held_tensor(self, owner: str | None, floating: bool = False) -> str | None:
        """A tensor the module `owner` holds (`self.ln1.weight`), to take a device from when no
        tensor argument is at hand; with `floating`, one of the model's floating dtype, to take the
        dtype the model holds now from."""
        path = self.plans.layout.held(self.model, owner, floating)
        return f"self.{path}" if path else None

    def loop_call(self, em: Emitter, loop: ir.Loop, indent: int) -> list[str]:
        return blocks.loop_call(self, em, loop, indent)

    def _model_dtype(self) -> str | None:
        """Code, in the Model's methods, for the floating dtype its parameters hold now: after
        `.to(torch.bfloat16)`, bfloat16. None when the model holds no floating tensor."""
        if self.model.float_dtype is None:
            return None
        held = self.held_tensor(None, floating=True)
        return f"{held}.dtype" if held else f"_held_dtype(self, torch.{self.model.float_dtype})"

    # ---------------------------------------------------------------- the whole file
    def render(self) -> str:
        m, plans = self.model, self.plans
        names = Namespace(FORWARD_RESERVED)
        inputs = sorted(m.inputs, key=lambda i: i.optional)
        for i in inputs:
            names.keep(i.name, FORWARD_RESERVED)
        em = Emitter(self, None, names, cfg="cfg" if "cfg" not in names.map else names.fresh("config"))
        first = next((i for i in inputs if not i.optional), None)
        em.device_src = first.name if first is not None else self.held_tensor(None)
        em.dtype_src = names.fresh("dtype") if self.model_dtype else None  # bound first, when forward uses it
        for demand in plans.outputs.demands:
            em.flags[demand.flag] = demand.flag
        if plans.decode_steps:  # generate's decode state: forward's argument, a name no input may take
            em.decode = "decode"
        # the blocks first: what each takes is read off its code, and the loops that call them pass it
        block_ctx = []
        for b in plans.blocks.blocks:
            ctx, self.takes[b.attr] = blocks.block_context(self, b)
            block_ctx.append(ctx)
        encode = self.encode_context(em)
        body = (encode["fetch"] if encode else []) + \
            em.stmts(m.body if encode is None else [s for i, s in enumerate(m.body) if i not in encode["stmts"]], 2)
        checks = self.inputs_method(em, inputs, self.input_checks(em, inputs))
        prologue = [f"{em.cfg} = self.config"]
        if em.dtype_src and (em.dtype_src in reads(body) or checks and em.dtype_src in checks["params"]):
            prologue.append(f"{em.dtype_src} = {self.model_dtype}  # the dtype the model holds now (a cast's)")
        if checks:
            prologue.append(checks["call"])
        out_fields = Namespace(attribute=True)
        outputs = [(out_fields.keep(o.name), names.name(o.name), o) for o in m.outputs]
        decl_em = Emitter(self, None, Namespace())
        decls = params.declaration_lines(decl_em, self, None)
        init_lines = params.init_lines(decl_em, self, None)
        conditions = config.condition_rows(self)
        optional_out = plans.outputs.optional_outputs
        ctx = {
            "version": __version__, "spec_path_repr": repr(self.spec_path),
            "sha256": m.sha256, "model_name": display_text(m.name), "spec_file": self.spec_file,
            "config": config.field_rows(self), "derived": config.derived_rows(self),
            "conditions": conditions,
            "blocks": block_ctx, "decls": decls, "init_lines": init_lines,
            "inputs": [(i.name, "Optional[torch.Tensor]" if i.optional else "torch.Tensor", i.optional,
                        self.show(i.ty.shape)) for i in inputs],
            "keywords": self.keyword_arguments(encode is not None),
            "shapes": self.shape_comment(inputs) + self.state_comment(encode is not None),
            "prologue": prologue, "body": body, "checks": checks,
            "outputs": [(f, n, self.show(o.ty.shape), o.optional or o.name in optional_out)
                        for f, n, o in outputs],
            "flags": self.flag_rows(),
            "spec_parameters": self.spec_parameter_rows(),
            "tp": self.tp_rows(),
            "tp_no_sequence": self.plans.sequence.refused is not None,
            "recomputed_buffers": params.recomputed_buffers(m),
            "checkpoints": self.checkpoint_rows(),
            "docstring": f"{display_text(m.name)}: generated by snfc from {self.spec_file}.",
            "uses_checkpoint": bool(plans.blocks.blocks) and "gradient_checkpointing" in self.config_fields,
            "generate": self.generate_context(),
            "decode_steps": plans.decode_steps,
            "decode_slots": plans.decode_steps and plans.caches.preallocated.size is not None,
            "encode": encode,
        }
        own = _env().get_template("module.py.j2").render(**ctx)  # the model's code, then its frame from it
        frame = {"code": own, "standalone": self.standalone, "abi": runtime.ABI, "runtime_imports": [],
                 "runtime_compile": "", "runtime": "", "docstring": ctx["docstring"], "version": __version__,
                 "spec_path_repr": ctx["spec_path_repr"], "sha256": m.sha256, "uses_checkpoint": ctx["uses_checkpoint"]}
        if self.standalone:  # the runtime's definitions the code calls, and what they call
            used = runtime.needed(own)
            frame.update(runtime_compile=runtime.copy(*runtime.PARTS, names=used & runtime.DECORATORS),
                         runtime=runtime.copy(*runtime.PARTS, names=used - runtime.DECORATORS))
        else:
            frame["runtime_imports"] = runtime.imports(runtime.called(own), LIMIT)
        frame["std_imports"] = _std_imports("\n".join((own, frame["runtime_compile"], frame["runtime"])))
        # CHECKPOINTS, a data table, is wrapped at its own width
        head, table, tail = _split_statement(_env().get_template("frame.py.j2").render(**frame), "CHECKPOINTS = {")
        return wrap(head) + wrap(table, DATA_LIMIT) + wrap(tail)

    def flag_rows(self) -> list[tuple[str, list[str]]]:
        """forward's keyword arguments that ask for optional outputs, each with its comment lines."""
        rows = []
        for d in self.plans.outputs.demands:
            asked = ", ".join(o.name for o in self.model.outputs if o.name in d.outputs)
            if d.flag == "use_cache":
                rows.append((d.flag, [f"use_cache: also return the caches {asked} (by default when not training; "
                                      "else they are None)"]))
            else:
                given = " and ".join(d.off_in_training_with)
                rows.append((d.flag, [f"{d.flag}: compute {asked} (by default, unless training{' with ' + given if given else ''}: then",
                                      f"the loss runs fused with its head, in chunks of rows, and {asked} is None)"]))
        return rows

    # ---------------------------------------------------------------- forward's inputs
    def keyword_arguments(self, encodes: bool) -> list[str]:
        """forward's keyword-only arguments: the flags, then the state generate hands each step (an
        encoder-decoder's encoded values, a decode step's state), None where a caller gives none."""
        return ([f"{flag}: Optional[bool] = None" for flag, _ in self.flag_rows()]
                + ["encoded: Optional[tuple] = None"] * encodes
                + ["decode: Optional[_DecodeState] = None"] * self.plans.decode_steps)

    def state_comment(self, encodes: bool) -> list[str]:
        """forward's comment on the state generate hands each step."""
        lines = ["encoded: the encoder's values, which generate computes once (_encode); None: computed here"]
        return lines * encodes + ["decode: a decode step of generate (see _decode), over the caches' preallocated "
                                  "buffers; None otherwise"] * self.plans.decode_steps

    def shape_comment(self, inputs) -> list[str]:
        """forward's comment on its inputs' shapes: `idx, targets: [B, T]; ...`, inputs of one shape
        together, in lines of at most 100 characters."""
        shapes: dict[str, list[str]] = {}
        for i in inputs:
            shapes.setdefault(self.show(i.ty.shape), []).append(i.name)
        lines = [""]
        for shape, names in shapes.items():
            item = f"{', '.join(names)}: {shape}"
            if lines[-1] and len(lines[-1]) + len(item) + 2 > 100:
                lines.append("")
            lines[-1] += f"; {item}" if lines[-1] else item
        return [line for line in lines if line]

    def inputs_method(self, em: Emitter, inputs, lines: list[str]) -> dict | None:
        """`Model._inputs`: forward's input checks (`lines`), out of the way of its computation, and
        the call of it in forward. It takes the forward locals its code reads and returns those it
        binds: the run-time dims, then the inputs and flags it rebinds (a cast, a default)."""
        if not lines:
            return None
        found = names_in(["        " + line for line in lines])
        read = {n.id for n in found if isinstance(n.ctx, ast.Load)}
        stored = list(dict.fromkeys(n.id for n in found if isinstance(n.ctx, ast.Store) and n.id not in (em.cfg, "_")))
        args = [i.name for i in inputs] + [d.flag for d in self.plans.outputs.demands]
        params = [n for n in args + [em.dtype_src, em.decode] if n and n in read]
        returns = [n for n in stored if n not in args] + [n for n in args if n in stored]
        call = f"self._inputs({', '.join(params)})"
        if returns:
            call = f"{', '.join(returns)} = {call}"
        shown = ", ".join(returns)
        what = [w for w, given in (("the sizes they give", any(n not in args for n in returns)),
                                   ("the floats in the model's dtype", any(i.name in stored for i in inputs)),
                                   ("the flags' values", any(d.flag in stored for d in self.plans.outputs.demands)))
                if given]
        return {"call": call, "params": params, "lines": ([f"{em.cfg} = self.config"] if em.cfg in read else []) + lines,
                "returns": shown if len(shown) <= 80 else f"({shown})",
                "ann": " -> tuple" if len(returns) > 1 else " -> None" if not returns else "",
                "what": ", ".join(what[:-1]) + " and " + what[-1] if len(what) > 1 else "".join(what)}

    def input_checks(self, em: Emitter, inputs) -> list[str]:
        """forward's flags' defaults, its inputs' checks (binding the run-time dims they give) and
        the checks on those dims."""
        lines = []
        for demand in self.plans.outputs.demands:
            given = "".join(f" and {em.names.name(i)} is not None" for i in demand.off_in_training_with)
            lines += [f"if {demand.flag} is None:",
                      f"    {demand.flag} = not {f'(self.training{given})' if given else 'self.training'}"]
        bound: set[str] = set()
        cached = [i for i in inputs if self.plans.caches.preallocated and self.plans.caches.by_input(i.name)]
        for i in inputs:
            if i not in cached:
                lines += self.input_lines(em, i, bound)
            elif i is cached[0]:  # the cache inputs, checked together
                lines += self.preallocated_lines(em, cached, bound)
        together = self.plans.caches.together  # a hybrid's caches, given together: its groups in one check
        groups = [g for g in self.model.input_groups if not set(g) <= set(together)] + ([together] if together else [])
        for group in groups:
            lines.append(f"_check_together({tuple(group)!r}, ({', '.join(group)}))")
        for c in self.model.forward_checks:
            lhs, rhs = self.show((c.lhs,))[1:-1], self.show((c.rhs,))[1:-1]
            why = ""
            if c.why:  # the checker's sentence, with the sizes it is about
                sizes = ", ".join(f"{s!r}: {em.atom(s)}" for s in c.fields)
                why = f", {display_text(c.why)!r}, {{{sizes}}}"
            call = (f"_check_dims({lhs!r}, {em.dim(c.lhs)}, {c.op!r}, {rhs!r}, {em.dim(c.rhs)}, "
                    f"{self.spec_file + ':' + str(c.span.line)!r}{why})")
            if c.when:  # its statement runs only then (`if past exists`, `if cfg.small`)
                lines.append(f"if {' and '.join(em.code(w, 3) for w in c.when)}:\n            {call}")
            else:
                lines.append(call)
        return lines

    def input_lines(self, em: Emitter, i: ir.Tensor, bound: set, shape: tuple = (),
                    check: str = "_check_input", bind: bool = True) -> list[str]:
        """Check one input's rank, dtype and known sizes (of `shape`, its declared one by default),
        and bind the run-time dims it brings (into `bound`)."""
        lines = []
        n = i.name
        dims = [d.as_symbol() if d.as_symbol() in self.runtime else None for d in i.ty.shape]
        shape = shape or i.ty.shape
        fixed = {axis: em.dim(d) for axis, d in enumerate(shape)
                 if not (d.symbols() & self.runtime) or d.symbols() <= bound}
        sizes = ", {" + ", ".join(f"{a}: {code}" for a, code in fixed.items()) + "}" if fixed else ""
        call = f"{check}({display_text(n)!r}, {n}, {i.ty.rank}, {self.show(shape)!r}, {i.ty.dtype!r}{sizes})"
        if check == "_check_input" and i.ty.dtype == self.model.float_dtype and em.dtype_src:
            # in the dtype the model holds: a cast model's (docs/language.md 3.2)
            call += f"\n{'    ' * (3 if i.optional else 2)}{n} = {n}.to({em.dtype_code(i.ty.dtype)})"
        lines.append(call if not i.optional else f"if {n} is not None:\n            {call}")
        new = [d for d in dims if d and d not in bound]
        if new and bind:
            if i.optional:
                for axis, d in enumerate(dims):
                    if d and d not in bound:
                        lines.append(f"{em.names.name(d)} = {n}.size({axis}) if {n} is not None else 0")
                        bound.add(d)
            else:
                targets = ", ".join(em.names.name(d) if d and d not in bound else "_" for d in dims)
                lines.append(f"{targets}{',' if i.ty.rank == 1 else ''} = {n}.shape")
                bound.update(d for d in dims if d)
        for axis_size in self.model.rows_indexed_by(i.name):
            ids = f"_check_index({display_text(n)!r}, {n}, {em.dim(axis_size)}, {self.show((axis_size,))[1:-1]!r})"
            lines.append(ids if not i.optional else f"if {n} is not None:\n            {ids}")
        return lines

    def preallocated_lines(self, em: Emitter, cached: list, bound: set) -> list[str]:
        """The cache inputs' checks twice: as growing tensors, and (in a decode step) as
        preallocated buffers of the bound's size, whose filled length is the decode position."""
        pre = self.plans.caches.preallocated
        grown, buffers, outer = [], [], set(bound)
        for i in cached:
            grown += self.input_lines(em, i, outer)
            shape = list(i.ty.shape)
            cache = self.plans.caches.by_input(i.name)
            if not cache.state:
                shape[cache.axis] = pre.size
            buffers += self.input_lines(em, ir.replace(i, optional=False), bound | {pre.dim} - {None}, tuple(shape),
                                        "_check_cache", False)
        given = ", ".join(i.name for i in cached)

        def nested(block: list[str]) -> list[str]:  # one level deeper, continuation lines too
            return ["    " + line.replace("\n", "\n    ") for line in block]
        if pre.dim is None:  # recurrent states alone: no slots, no position
            return [f"if {em.decode} is None:", *nested(grown), "else:  # the states' buffers, written over in place",
                    *nested([f"_check_decode({em.decode}, None, {display_text(given)!r}, {given})"] + buffers)]
        bound.add(pre.dim)
        dim = em.names.name(pre.dim)
        size = self.show((pre.size,))[1:-1]
        position = [f"_check_decode({em.decode}, {em.dim(pre.size)}, {display_text(given)!r}, {given})"]
        return [f"if {em.decode} is None:", *nested(grown), f"else:  # preallocated caches of {size} slots, "
                f"{dim} of them filled", *nested(position + buffers + [f"{dim} = {em.decode}.position"])]

    # ---------------------------------------------------------------- an encoder-decoder's encoder
    def encode_context(self, em: Emitter) -> dict | None:
        """`Model._encode`: the statements an encoder-decoder's generate runs once (the encoder
        plan), binding the sizes they use from the encoder's inputs; and the lines of forward that
        take their values from generate (forward's `encoded`) or compute them."""
        plan = self.plans.decode.encoder if self.plans.decode is not None else None
        if plan is None:
            return None
        m = self.model
        lines = em.stmts([m.body[i] for i in plan.stmts], 2)
        bind, bound = [], set()
        for i in sorted((t for t in m.inputs if t.name in plan.inputs), key=lambda t: t.optional):
            for axis, d in enumerate(i.ty.shape):
                dim = d.as_symbol()
                if dim in self.runtime and dim not in bound and not i.optional:
                    bind.append(f"{em.names.name(dim)} = {i.name}.size({axis})")
                    bound.add(dim)
        if em.dtype_src in reads(lines):
            bind.insert(0, f"{em.dtype_src} = {self.model_dtype}  # the dtype the model holds now (a cast's)")
        values = ", ".join(em.names.name(v) for v in plan.values) + ("," if len(plan.values) == 1 else "")
        args = ", ".join(f"{n}={n}" for n in plan.inputs)
        fetch = ["        if encoded is None:  # else generate hands them in, computed once for all its steps",
                 f"            {values} = self._encode({args})",
                 "        else:",
                 f"            {values} = encoded"]
        optional = {i.name for i in m.inputs if i.optional}
        signature = ", ".join(f"{n}: Optional[torch.Tensor] = None" if n in optional else f"{n}: torch.Tensor"
                              for n in plan.inputs)
        return {"stmts": set(plan.stmts), "fetch": fetch, "signature": signature, "prologue": bind,
                "body": lines, "returned": values, "inputs": plan.inputs, "cfg": em.cfg}

    # ---------------------------------------------------------------- generate
    def generate_context(self) -> dict | None:
        plan = self.plans.decode
        if plan is None:
            return None
        outputs = self.model.outputs
        single = len(outputs) == 1
        # generate's own names keep out of the way of the inputs it names (its tokens, the caches)
        local = Namespace(FORWARD_RESERVED | set(GENERATE_ARGS))
        tokens = local.keep(plan.tokens) if plan.tokens not in GENERATE_ARGS else local.fresh(plan.tokens)
        caches = [(local.fresh(c.input), c.output) for c in plan.caches]
        for n in plan.encoder.inputs if plan.encoder is not None else ():  # generate's arguments too
            local.keep(n)
        g = {n: local.fresh(n) for n in GENERATE_LOCALS}
        logits = g["out"] if single else f"{g['out']}.{plan.logits}"
        ctx = {"tokens": tokens, "logits": logits, "single": single, "g": g, "cache": caches,
               "cache_inputs": [c.input for c in plan.caches], "context": None, "context_name": None}
        ctx["recompute_past"] = None
        outside = Emitter(self, None, local, cfg="self.config")  # config values, in generate's own code
        if plan.recompute_past is not None:
            ctx["recompute_past"] = outside.code(plan.recompute_past)
        if plan.context is not None:
            ctx["context"] = outside.dim(plan.context)
            ctx["context_name"] = self.show((plan.context,))[1:-1]
        pairs = tuple((c.input, c.output) for c in plan.caches)
        # buffers of `context` slots along a KV cache's axis (of a layer's), a state's whole
        axes = tuple(None if c.state else c.axis - 1 for c in plan.caches) if self.plans.decode_steps else None
        how = f"tokens={plan.tokens!r}, logits={None if single else plan.logits!r}, caches={pairs!r}"
        ctx["encoder"] = None
        if plan.encoder is not None:
            fields = self.config_fields
            stops = "eos_token_id" in fields and "pad_token_id" in fields
            ctx["encoder"] = {"first": plan.encoder.inputs[0], "rest": plan.encoder.inputs[1:], "stop": stops}
            how += f", encoder={tuple(plan.encoder.inputs)!r}, stops={stops!r}"
        else:
            how += f", buffer_axes={axes!r}"
        ctx["how"] = f"{g['plan']} = _Generation({how})"
        return ctx

    # ---------------------------------------------------------------- tables for snf.interop
    def tp_rows(self) -> TpRows:
        """The tensor-parallel tables' rows, as the tensor-parallel and sequence-parallel passes planned them."""
        tp = self.plans.tp
        plan = [f"{key!r}: {style!r}," for key, style in tp.styles().items()]
        em = Emitter(self, None, Namespace(), cfg="c")
        requires = [f"(lambda c, tp: {em.dim(r.units, 20)} % tp == 0, {r.message(self.display, self.spec_file)!r}),"
                    for r in tp.requires]
        local, pieces = _tp_pieces(tp, self.derived_by_dim, em)
        return TpRows(plan, requires, local, pieces, _tp_sequence(self.plans.sequence, self.spec_file),
                      [f"{key!r}: {axis!r}," for key, axis in tp.expert_axes])

    def spec_parameter_rows(self) -> list[str]:
        """`spec_parameters(cfg)`: spec name -> a `_SpecParameter` row (snf/runtime/tables.py): its
        state-dict key, the shape of its piece of that tensor (one layer's) or None where the config
        leaves it out, its dtype, and where they apply the rows of a fused tensor, the layer loop (the
        layout plan's owner) and its layers: their count, or for a tensor of some layers only the tuple
        of their numbers."""
        em = Emitter(self, "config", Namespace())
        rows = []
        for place in self.plans.layout.places:
            t = self.model.param(place.name)
            block = self.plans.blocks.owner(place.name)
            dims = [em.dim(d) for d in (t.ty.shape[1:] if block else t.ty.shape)]
            shape = f"({dims[0]},)" if len(dims) == 1 else f"({', '.join(dims)})"
            if t.condition is not None and not t.layer_var:  # a config switch, which the layers above do not say
                shape = f"{shape} if {em.code(t.condition)} else None"
            fields = [repr(place.key), f"shape={shape}", f"dtype=torch.{t.ty.dtype}"]
            if place.rows is not None:
                fields.append(f"rows=({em.dim(place.rows[0])}, {em.dim(place.rows[1])})")
            if block:
                layers = em.dim(block.loop.count)
                if t.layer_var:  # the layers it exists on, as a tuple of their numbers
                    var = em.names.name(block.loop.var)
                    layers = f"tuple({var} for {var} in range({layers}) if {em.code(params.layer_condition(self, t))})"
                fields += [f"loop={place.owner!r}", f"layers={layers}"]
            rows.append(f"{place.name!r}: _SpecParameter({', '.join(fields)}),")
        return rows

    def checkpoint_rows(self) -> list[str]:
        """`CHECKPOINTS`: format -> 'params' (spec parameter -> its source), 'ignore' (keys the model
        does not need: tied copies) and, where the spec has a `config FMT:` section, 'config'."""
        # a format, and its 'params' and 'config', one entry a line
        return [row for fmt, entry in encode_sections(self.model).items()
                for row in _data_rows(f"{fmt!r}: ", entry, open_levels=2)]


class TpRows(NamedTuple):
    """The rows of the generated Model's tensor-parallel tables (module.py.j2 reads them by name)."""

    plan: list[str]  # `tp_plan`: module path: style
    requires: list[str]  # `tp_requires`: (a check of the config and tp, the message when it fails)
    local: tuple[str, ...]  # `tp_local`: the config values a rank holds 1/tp of
    pieces: list[str]  # `tp_pieces`: a colwise_pieces path: its pieces' sizes of a config
    sequence: list[str]  # `tp_sequence`'s entries, or `tp_no_sequence`'s lines (_tp_sequence)
    expert_axes: list[str]  # `tp_expert_axes`: an experts path: the axis its role shards, None for whole


def _tp_pieces(tp, derived_by_dim: dict, em) -> tuple[tuple[str, ...], list[str]]:
    """`tp_local`'s names and `tp_pieces`' entries. The forward slices a projection of pieces by the
    sizes' code, which must read the rank's part: a derived dim (Phi-3's `cfg.q_dim`, then divided
    too), a name of tp_local, or a product of one with whole sizes (Mamba2's `G * N`); a size the
    forward reads whole elsewhere (SnowflakeCore's pieces of n_embd) gets no entry, and
    snf.parallelize refuses the projection. The derived dims the pieces' bounds read (Mamba2's
    `d_inner + conv_dim`) are divided too."""
    from ..passes.tp_sizes import degree
    local = set(tp.local())
    tables = [(key, sizes) for key, sizes in tp.pieces
              if all(d in derived_by_dim or degree(d, local) == 1 for d in sizes)]
    pieces = [f"{key!r}: lambda c: ({', '.join(em.dim(d) for d in sizes)}{',' * (len(sizes) == 1)}),"
              for key, sizes in tables]
    read = [d for _, sizes in tables for d in sizes] + sorted(tp.bounds, key=str)
    derived = {derived_by_dim[d] for d in read if d in derived_by_dim}
    return tuple(sorted(local | derived)), pieces


def _tp_sequence(sequence, spec_file: str) -> list[str]:
    """`tp_sequence`'s entries (a module path: its part in sequence parallelism) or, where the plan refuses
    it, `tp_no_sequence`'s (why, with the spec line: strings a line each)."""
    if sequence.refused is None:
        return [f"{key!r}: {role!r}," for key, role, _ in sequence.roles]
    why, span = sequence.refused
    why += f" ({spec_file}:{span.line})" if span.line else ""
    return [repr(part) for part in textwrap.wrap(why, 100, drop_whitespace=False)]


def _data_rows(head: str, value, indent: str = "", open_levels: int = 0) -> list[str]:
    """`head` and the data `value` (a literal) as lines of a table entry, each ending in a comma: on
    one line when it fits and is not one of the `open_levels` outer dicts; else a dict one line per
    key, and a tuple of tuples (the asserts) one line per item; else one long line, which the wrap
    pass breaks."""
    one = f"{indent}{head}{value!r},"
    nested = isinstance(value, dict) or isinstance(value, tuple) and value and \
        all(isinstance(v, tuple) for v in value)
    if not nested or len(one) + 4 <= DATA_LIMIT and not (open_levels and isinstance(value, dict)):
        return [one]  # (+ 4: the template's indent)
    inner = indent + "    "
    if isinstance(value, dict):
        return [f"{indent}{head}{{", *(r for k, v in value.items()
                                        for r in _data_rows(f"{k!r}: ", v, inner, max(open_levels - 1, 0))),
                f"{indent}}},"]
    return [f"{indent}{head}(", *(r for v in value for r in _data_rows("", v, inner)), f"{indent}),"]


def _split_statement(text: str, start: str) -> tuple[str, str, str]:
    """`text` before the top-level statement whose first line is `start`, the statement (to its
    closing bracket at column 0), and the rest."""
    begin = text.index("\n" + start + "\n") + 1
    end = text.index("\n}\n", begin) + 3
    return text[:begin], text[begin:end], text[end:]


# The standard library's names a module may use, each with the import that binds it, in the order
# the imports are written.
_STDLIB = (("contextlib", "import contextlib"), ("dataclasses", "import dataclasses"),
           ("functools", "import functools"), ("json", "import json"), ("math", "import math"), ("os", "import os"),
           ("sys", "import sys"), ("threading", "import threading"), ("time", "import time"),
           ("warnings", "import warnings"), ("weakref", "import weakref"),
           ("dataclass", "from dataclasses import dataclass"), ("NamedTuple", "from typing import {}"),
           ("Optional", "from typing import {}"))


def _std_imports(code: str) -> list[str]:
    """The standard-library imports of the names `code` uses (those of one module, `typing`'s
    together)."""
    names = {n.id for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Name)}
    lines: dict[str, list[str]] = {}
    for name, line in _STDLIB:
        if name in names:
            lines.setdefault(line, []).append(name)
    return [line.format(", ".join(used)) for line, used in lines.items()]


def generate(plans: Plans, spec_path: str, standalone: bool = False) -> str:
    return Generator(plans, spec_path, standalone).render()


__all__ = ["generate", "Generator", "display_text"]
