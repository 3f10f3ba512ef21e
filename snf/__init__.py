"""snfc: compile SNF transformer specs to readable PyTorch modules.

Importing `snf` does not import torch; `snf.load`, `snf.from_pretrained`, `snf.save_pretrained`,
`snf.generate_text`, `snf.parallelize` and `snf.interop` do.
"""

from __future__ import annotations

from .version import __version__

__all__ = ["__version__", "load", "from_pretrained", "save_pretrained", "generate_text", "parallelize"]


def load(path):
    """Compile a spec in process and return its module (`Config`, `Model`); cached by spec hash."""
    from .api import load as _load
    return _load(path)


def from_pretrained(path, *, spec=None, dtype=None, device=None, mmap=True, device_mesh=None, **tp):
    """A model from a transformers `save_pretrained` folder: the bundled spec for its model_type (or
    `spec`), its Config from config.json and its weights (snf.pretrained.from_pretrained); with
    `device_mesh`, sharded over it by snf.parallelize."""
    from .pretrained import from_pretrained as _from_pretrained
    return _from_pretrained(path, spec=spec, dtype=dtype, device=device, mmap=mmap, device_mesh=device_mesh, **tp)


def save_pretrained(model, folder):
    """Write a model as a transformers `save_pretrained` folder (snf.pretrained.save_pretrained)."""
    from .pretrained import save_pretrained as _save_pretrained
    return _save_pretrained(model, folder)


def generate_text(model, prompt, **options):
    """A prompt's continuation as text, through the model's folder's tokenizer (snf.text.generate_text):
    `model` a loaded model or a `save_pretrained` folder."""
    from .text import generate_text as _generate_text
    return _generate_text(model, prompt, **options)


def parallelize(model, mesh, **options):
    """`model` sharded over a DeviceMesh by its tensor-parallel plan (snf.parallel.parallelize): a 1-D
    mesh is tensor parallel, a 2-D one named ("dp", "tp") adds FSDP2 over "dp"."""
    from .parallel import parallelize as _parallelize
    return _parallelize(model, mesh, **options)


def __getattr__(name):
    if name in ("interop", "interpret", "pretrained"):
        import importlib
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(name)
