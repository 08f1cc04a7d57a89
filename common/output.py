"""What a command prints, as a notebook cell or a test reads it: plain text, shown a
whole line at a time.

Introduced in 00_intro with `common.launch`, which starts every command with
`plain_text` and shows its output with `LineStream`; `course.cluster` shows a Slurm
job's output file with it too, and lesson 04's `hangs/hang_tools.py` asks py-spy for
plain text.
"""

import re
import sys
from collections.abc import Mapping

# A Jupyter kernel sets FORCE_COLOR=1 and CLICOLOR_FORCE=1 (ipykernel does, so that
# tools colour what `!ls` shows), and every command a cell starts inherits them. Python
# 3.13 honours FORCE_COLOR by colouring its tracebacks with escape codes, and a check
# that looks for "KeyError: ('0', 0)" then finds "\x1b[1;35mKeyError\x1b[0m: ...".
FORCING_COLOUR = ("FORCE_COLOR", "CLICOLOR_FORCE")
ESCAPE_CODE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


def plain_text(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` for a command whose output a cell or a test reads: no variable that
    forces colour, PYTHON_COLORS=0 (Python's own switch, 3.13 on: it outranks
    FORCE_COLOR) and NO_COLOR=1 (the convention other tools follow). Only the commands
    the course starts get it: a learner's own terminal keeps its colours."""
    kept = {name: value for name, value in environ.items() if name not in FORCING_COLOUR}
    return {**kept, "PYTHON_COLORS": "0", "NO_COLOR": "1"}


class LineStream:
    """Text that arrives in pieces (a pipe's lines, a file that grows), kept in full and
    shown one whole line at a time after `prefix`: a line is never shown half-written,
    nor cut in two by another command's output."""

    def __init__(self, prefix: str = "", quiet: bool = False):
        self.prefix, self.quiet = prefix, quiet
        self.lines: list[str] = []  # each ends with "\n", but a last one may not
        self._unfinished = ""  # after the last "\n": shown when its line ends

    @property
    def text(self) -> str:
        return "".join(self.lines) + self._unfinished

    def add(self, text: str) -> None:
        """Keep `text`, and show the lines it completes."""
        text = self._unfinished + text
        cut = text.rfind("\n") + 1
        self._unfinished = text[cut:]
        self._show([line + "\n" for line in text[:cut].split("\n")[:-1]])

    def end(self) -> None:
        """No more text comes: keep and show the unfinished last line, if there is one,
        ending it on screen so that what is printed next starts a line of its own."""
        if self._unfinished:
            self._show([self._unfinished], end="\n")
            self._unfinished = ""

    def _show(self, lines: list[str], end: str = "") -> None:
        # Whole lines, so no escape code is cut in two; removed for a tool that colours
        # whatever the environment says.
        lines = [ESCAPE_CODE.sub("", line) for line in lines]
        self.lines.extend(lines)
        if lines and not self.quiet:
            sys.stdout.write("".join(self.prefix + line for line in lines) + end)
            sys.stdout.flush()
