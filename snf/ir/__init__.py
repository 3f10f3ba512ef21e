"""The IR: frozen dataclasses, each node keeping its source span.

Two layers, one module each:

* `syntax`: the nodes the front ends build (`Name`, `Call`, `Let`, `For`, ...), close to the text;
* `typed`: the types and the nodes the checker builds (`Ref`, `Op`, `Bind`, `Loop`, `Model`, ...),
  where every expression carries its type with symbolic shape, names are resolved, and calls are
  bound to an op's signature. Passes, code generation and the NumPy interpreter read only these.

`walk` is the one traversal of the typed IR (statements where they are, expressions, reads and
writes, rewriting). Everything is re-exported here: write `ir.Let`,
`ir.Model`, `ir.walk_stmts`.
"""

from dataclasses import field, replace

from .syntax import *  # noqa: F401,F403
from .syntax import __all__ as _syntax_names
from .typed import *  # noqa: F401,F403
from .typed import __all__ as _typed_names
from .walk import (Site, children, contains, index_rows, names_read, own_exprs, reads, rename_var, rewrite, sites,
                   subexprs, walk_exprs, walk_stmts, writes)

__all__ = [*_syntax_names, *_typed_names, "Site", "children", "contains", "index_rows", "names_read", "own_exprs", "reads", "rewrite", "sites",
           "subexprs", "rename_var", "walk_exprs", "walk_stmts", "writes", "replace", "field"]
