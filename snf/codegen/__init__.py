"""Stage 4: typed IR + plans -> a PyTorch module, rendered with Jinja2, which imports the runtime
helpers it calls from `snf.runtime` (or, standalone, holds a copy of them).

Python here decides *what* each line says (names, expressions, shape comments), reading every
fact from the typed IR and the plans (`snf.passes`); the templates in `templates/` decide how
the file is laid out. Every spec name goes through a `Namespace` (names a user types are kept
as they are), literals are emitted with `repr`, and spec text is never copied into code.

  emit.py    expressions and statements of one function
  params.py  parameter declarations and initialisation, as the layout plan places them
  blocks.py  a layer loop's Block class, and the loop over its layers
  config.py  the Config dataclass
  model.py   the file: Model, forward, generate, and the tables snf.interop reads
"""

from .model import generate

__all__ = ["generate"]
