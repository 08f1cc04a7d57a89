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


def _definition_node(scope: ast.AST, name: str, path: str | Path) -> ast.AST:
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
    return node


def _first_line(node: ast.AST) -> int:
    return min([node.lineno, *(d.lineno for d in node.decorator_list)])


def definition_text(path: str | Path, name: str) -> str:
    """The source of the function or class `name` (a method as `Class.method`),
    decorators included."""
    source = file_text(path)
    node = _definition_node(ast.parse(source), name, path)
    lines = source.splitlines()
    return "\n".join(lines[_first_line(node) - 1 : node.end_lineno])


def code_text(path: str | Path, leave_out: tuple[str, ...] = ()) -> str:
    """The script without its module docstring: each script describes itself, so the
    two descriptions differ wholesale and would bury the change in the code. The
    top-level functions and classes named in `leave_out` go too (with the blank lines
    after them), so that a change of two ideas can be shown as two diffs."""
    source = file_text(path)
    tree = ast.parse(source)
    lines = source.splitlines()
    dropped = set()
    if tree.body and ast.get_docstring(ast.Module(body=tree.body[:1], type_ignores=[])):
        dropped.update(range(1, tree.body[0].end_lineno + 1))
    for name in leave_out:
        node = _definition_node(tree, name, path)
        end = node.end_lineno
        while end < len(lines) and not lines[end].strip():
            end += 1  # lines[end] is line end + 1
        dropped.update(range(_first_line(node), end + 1))
    kept = [line for number, line in enumerate(lines, 1) if number not in dropped]
    return "\n".join(kept).lstrip("\n") + "\n"


def _definitions_text(path: str | Path, names: tuple[str, ...]) -> str:
    return "\n\n\n".join(definition_text(path, name) for name in names) + "\n"


def diff_text(
    old: str | Path,
    new: str | Path,
    context: int = 3,
    only: tuple[str, ...] = (),
    leave_out: tuple[str, ...] = (),
) -> str:
    """A unified diff from one script's code to the next's (module docstrings left out).
    `only` limits it to the named top-level definitions, `leave_out` leaves them out:
    one script's change, shown as the diff of each idea it adds."""
    if only:
        old_text, new_text = _definitions_text(old, only), _definitions_text(new, only)
    else:
        old_text, new_text = code_text(old, leave_out), code_text(new, leave_out)
    return "".join(
        difflib.unified_diff(
            old_text.splitlines(keepends=True),
            new_text.splitlines(keepends=True),
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


def show_diff(
    old: str | Path,
    new: str | Path,
    context: int = 3,
    only: tuple[str, ...] = (),
    leave_out: tuple[str, ...] = (),
) -> Markdown:
    """What changed from `old` to `new`, as a highlighted diff (`diff_text`)."""
    return _fenced(diff_text(old, new, context, only, leave_out), "diff")
