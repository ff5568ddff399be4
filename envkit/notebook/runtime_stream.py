"""envkit's notebook helper: a program run with its output shown as it comes (envkit/notebook/runtime.py's steps
install the environment and run the program through it). Standard library only, shipped beside the helper.
"""

from __future__ import annotations

import os
import re
import select
import subprocess
import sys
import threading
from pathlib import Path


def stream(argv: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> tuple[int, str]:
    """Run ``argv`` with its output shown as it comes (progress bars included); (exit code, last line).

    It returns when the program ends, as a shell in a terminal does: a child the program left running (a
    ``sleep &``, a TensorBoard server) holds the output pipe open, and would hold the cell until it ended. What
    such a child writes later is still shown, from a thread."""
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=cwd)
    pipe, tail, after, closed = process.stdout.fileno(), b"", 0, False
    while after < 64 and not closed:  # once the program has ended: what it wrote, not a child's endless output
        after += process.poll() is not None
        if not select.select([pipe], [], [], 0 if after else 0.1)[0]:
            if after:
                break
            continue
        chunk = os.read(pipe, 65536)
        closed = not chunk  # nobody holds the pipe any more
        _show(chunk)
        tail = (tail + chunk)[-4096:]
    code = process.wait()
    if closed:
        process.stdout.close()
    else:
        threading.Thread(target=_show_until_closed, args=(process.stdout,), daemon=True).start()
    lines = [line.strip() for line in re.split(r"[\r\n]+", tail.decode("utf-8", errors="replace")) if line.strip()]
    return code, lines[-1] if lines else "no output"


def _show(chunk: bytes) -> None:
    sys.stdout.write(chunk.decode("utf-8", errors="replace"))
    sys.stdout.flush()


def _show_until_closed(stream) -> None:
    with stream:
        while chunk := os.read(stream.fileno(), 65536):
            _show(chunk)
