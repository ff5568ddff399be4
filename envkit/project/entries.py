"""Which of a repository's top-level ``*.py`` files are entry scripts, found by what they are, never imported.

Each file is read (at most MAX_SCRIPT_BYTES) and parsed with ``ast``. An entry script has an
``if __name__ == "__main__"`` guard; or imports a framework (torch, lightning, keras, ...), trains (a loss's
``.backward()``, an ``optimizer.step()``, a trainer's or a Keras model's ``fit``, a ``trainer.train()``) and
has code at its top level that runs; or is named as scripts are run (train.py, main.py, ...) with such code.
Every other file is skipped with the reason, which `envkit init` prints. A script that reads the rank torchrun
gives runs under torchrun; one that only opens CUDA (``torch.cuda.set_device``, NCCL, ``.cuda()``, with no CPU
path) runs on GPU targets only.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

from envkit.support.bounded_load import Refused, read_text

# A script larger than this is generated or data, not one a user runs by hand: it is skipped unread.
MAX_SCRIPT_BYTES = 2**20
# A script run as it is, without a main guard: these names, with a statement at the top level that does something.
ENTRY_NAMES = ("train", "main", "run", "finetune", "fine_tune", "pretrain", "evaluate", "eval", "benchmark", "bench")
# The packages whose import, with a training call, makes a file a training script (top-level names).
FRAMEWORKS = frozenset(
    ("torch", "lightning", "pytorch_lightning", "tensorflow", "keras", "jax", "flax", "transformers", "accelerate")
)
# What torchrun gives each process (or what only a process group needs): such a script runs under torchrun.
_TORCHRUN = re.compile(
    r"""(environ(\.get)?\s*[\[(]\s*|getenv\s*\(\s*)['"](LOCAL_RANK|RANK|LOCAL_WORLD_SIZE)['"]|init_process_group\s*\("""
)
_NOT_ENTRY = re.compile(r"^(setup|conftest|test_.*|.*_test)\.py$")
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*\.py")


@dataclass(frozen=True)
class Script:
    name: str  # the file's name, at the repository's top
    reason: str  # why it is an entry script, or why it was skipped
    entry: bool
    torchrun: bool = False
    cuda_only: tuple[str, ...] = ()  # what ties it to CUDA where it has no CPU path: torch.cuda.set_device, nccl


def survey(root: Path) -> tuple[Script, ...]:
    """Every top-level ``*.py`` of ``root``, by name, each an entry script or skipped with the reason."""
    return tuple(_survey_one(path) for path in sorted(root.glob("*.py")))


def _survey_one(path: Path) -> Script:
    name = path.name
    if _NOT_ENTRY.match(name):
        return Script(name, "packaging or tests, not a script one runs", False)
    if not _NAME.fullmatch(name):
        return Script(name, "its name is not letters, digits and _ (an experiment's command names it)", False)
    try:
        if path.stat().st_size > MAX_SCRIPT_BYTES:
            return Script(name, f"over {MAX_SCRIPT_BYTES // 2**20} MiB: generated or data, not read", False)
        text = read_text(path, MAX_SCRIPT_BYTES)  # bounded still: the file may grow, or be a FIFO
        tree = ast.parse(text, filename=name)
    except Refused as exc:
        return Script(name, f"not read: {exc.reason}", False)
    except OSError as exc:
        return Script(name, f"not read: {exc.strerror or exc}", False)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        where = f" (line {exc.lineno})" if isinstance(exc, SyntaxError) and exc.lineno else ""
        return Script(name, f"not Python that parses{where}", False)
    reason, entry = _why(path.stem, tree)
    if not entry:
        return Script(name, reason, False)
    return Script(name, reason, True, _TORCHRUN.search(text) is not None, _cuda_only(tree))


def _why(stem: str, tree: ast.Module) -> tuple[str, bool]:
    """Why the module is an entry script, or why not."""
    if any(_is_main_guard(statement) for statement in tree.body):
        return 'an if __name__ == "__main__" guard', True
    runs = any(_runs(statement) for statement in tree.body)
    trains = _training_call(tree) if _imports_framework(tree) else None
    if trains and runs:
        return f"top-level code that trains ({trains})", True
    if runs and stem.lower() in ENTRY_NAMES:
        return "named as scripts are run, with top-level code", True
    if trains:
        return f"trains ({trains}) but nothing runs at its top level and it has no __main__ guard: a module", False
    return "no __main__ guard, and no top-level code that trains", False


def _is_main_guard(statement: ast.stmt) -> bool:
    if not isinstance(statement, ast.If) or not isinstance(statement.test, ast.Compare):
        return False
    sides = [statement.test.left, *statement.test.comparators]
    return any(isinstance(side, ast.Name) and side.id == "__name__" for side in sides) and any(
        isinstance(side, ast.Constant) and side.value == "__main__" for side in sides
    )


def _runs(statement: ast.stmt) -> bool:
    """A top-level statement that calls something when the file runs (a definition or an import does not)."""
    if isinstance(statement, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return False
    return any(isinstance(node, ast.Call) for node in ast.walk(statement))


def _imports_framework(tree: ast.Module) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(alias.name.split(".")[0] in FRAMEWORKS for alias in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] in FRAMEWORKS:
            return True
    return False


def _training_call(tree: ast.Module) -> str | None:
    """The first training call, as written (``loss.backward()``), or None."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        method, receiver = node.func.attr, _last_name(node.func.value).lower()
        if (
            method == "backward"
            or method == "fit"
            or (method == "step" and (receiver.startswith("opt") or "optim" in receiver))
            or (method == "train" and receiver.endswith("trainer"))
        ):
            return f"{_last_name(node.func.value) or '...'}.{method}()"
    return None


def _last_name(node: ast.expr) -> str:
    """The name a call is made on: ``optimizer`` of ``self.optimizer``, ``Trainer`` of ``L.Trainer(...)``."""
    if isinstance(node, ast.Call):
        return _last_name(node.func)
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _cuda_only(tree: ast.Module) -> tuple[str, ...]:
    """What opens CUDA only (set_device, NCCL, .cuda()), where nothing chooses a CPU (is_available, gloo, "cpu")."""
    cuda: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and node.value in ("gloo", "cpu"):
            return ()
        if isinstance(node, ast.Attribute) and node.attr == "is_available":
            return ()
        if isinstance(node, ast.Constant) and node.value == "nccl":
            cuda.append("nccl")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr == "set_device" and _last_name(node.func.value) == "cuda":
                cuda.append("torch.cuda.set_device")
            elif node.func.attr == "cuda":
                cuda.append(".cuda()")
    return tuple(dict.fromkeys(cuda))
