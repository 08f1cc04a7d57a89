"""Show code in a notebook, read from the script files when the cell runs.

Introduced in 00_intro; used by every lesson notebook.

The notebook never holds a pasted copy of a script, so what the learner reads is
always what the next cell runs. `show_diff` shows how a lesson's script grew from
the previous one (the picotron idea: each step is the last one plus one idea).
"""

import ast
import difflib
from pathlib import Path

from IPython.display import Markdown


def _fenced(text: str, language: str) -> Markdown:
    # A fence longer than any run of backticks in the text, so nothing breaks out.
    fence = "`" * max(3, _longest_backtick_run(text) + 1)
    return Markdown(f"{fence}{language}\n{text.rstrip()}\n{fence}")


def _longest_backtick_run(text: str) -> int:
    longest = run = 0
    for char in text:
        run = run + 1 if char == "`" else 0
        longest = max(longest, run)
    return longest


def file_text(path: str | Path) -> str:
    return Path(path).read_text(encoding="utf-8")


def definition_text(path: str | Path, name: str) -> str:
    """The source of the function or class `name` (a method as `Class.method`),
    decorators included."""
    source = file_text(path)
    scope = ast.parse(source)
    node = None
    for part in name.split("."):
        node = next(
            (
                child
                for child in ast.iter_child_nodes(scope)
                if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
                and child.name == part
            ),
            None,
        )
        if node is None:
            raise LookupError(f"{path} defines no function or class named {name!r}")
        scope = node
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    lines = source.splitlines()
    return "\n".join(lines[first - 1 : node.end_lineno])


def code_text(path: str | Path) -> str:
    """The script without its module docstring: each script describes itself, so the
    two descriptions differ wholesale and would bury the change in the code."""
    source = file_text(path)
    body = ast.parse(source).body
    if not (body and ast.get_docstring(ast.Module(body=body[:1], type_ignores=[]))):
        return source
    return "\n".join(source.splitlines()[body[0].end_lineno :]).lstrip("\n") + "\n"


def diff_text(old: str | Path, new: str | Path, context: int = 3) -> str:
    """A unified diff from one script's code to the next's (module docstrings left out)."""
    return "".join(
        difflib.unified_diff(
            code_text(old).splitlines(keepends=True),
            code_text(new).splitlines(keepends=True),
            fromfile=str(old),
            tofile=str(new),
            n=context,
        )
    )


def show_file(path: str | Path) -> Markdown:
    """A whole script, highlighted."""
    return _fenced(file_text(path), "python")


def show_definition(path: str | Path, name: str) -> Markdown:
    """One function or class of a script, highlighted."""
    return _fenced(definition_text(path, name), "python")


def show_diff(old: str | Path, new: str | Path, context: int = 3) -> Markdown:
    """What changed from `old` to `new`, as a highlighted diff."""
    return _fenced(diff_text(old, new, context), "diff")
