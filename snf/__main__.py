import importlib.util
import os
import sys
from pathlib import Path


def _checkout_venv() -> Path | None:
    """`python3 -m snf` in a checkout set up by scripts/setup.sh, run by a Python that lacks what
    `check` and `compile` need (lark, jinja2): the checkout's .venv, which has them; else None."""
    if all(importlib.util.find_spec(name) for name in ("lark", "jinja2")):
        return None
    venv = Path(__file__).resolve().parent.parent / ".venv"
    python = venv / "bin" / "python"
    # this Python is the venv's (its prefix, or under -S, which skips the venv's site, its path)
    mine = Path(sys.prefix).resolve() == venv.resolve() or Path(os.path.abspath(sys.executable)).parent.parent == venv
    if not python.exists() or mine or os.environ.get("SNFC_FROM_PYTHON"):
        return None
    return python


if __name__ == "__main__":
    venv_python = _checkout_venv()
    if venv_python is not None:
        print(f"snfc: {sys.executable} lacks lark or jinja2; running with the checkout's {venv_python}",
              file=sys.stderr)
        os.environ["SNFC_FROM_PYTHON"] = sys.executable  # once: never back and forth
        os.execv(str(venv_python), [str(venv_python), "-m", "snf", *sys.argv[1:]])
    from .cli import main

    sys.exit(main())
