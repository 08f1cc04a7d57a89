"""common.distributed.end_process: the exit of every lesson script that joins a process
group. It must keep what a normal exit does (buffered output written, exit handlers
run, the exit code) and leave out only the interpreter's teardown."""

import subprocess

from conftest import PYTHON, REPO

SCRIPT = """
import atexit, sys
from common.distributed import end_process

class Finalized:
    def __del__(self):
        print("teardown ran")  # only during Python's teardown

kept = Finalized()
atexit.register(lambda: print("exit handler ran"))
sys.stdout.write("buffered, not flushed")
sys.stderr.write("to stderr")
end_process({code})
print("not reached")
"""


def ends(code: int) -> subprocess.CompletedProcess:
    # Output to a pipe is block-buffered: nothing is written before end_process flushes.
    return subprocess.run(
        [PYTHON, "-c", SCRIPT.format(code=code)], capture_output=True, text=True, timeout=120
    )


def test_output_and_exit_handlers_survive_and_the_teardown_is_skipped():
    result = ends(0)
    assert result.returncode == 0
    assert result.stdout == "buffered, not flushedexit handler ran\n"
    assert result.stderr == "to stderr"


def test_the_exit_code_is_the_one_given():
    assert ends(3).returncode == 3


def test_every_lesson_script_that_joins_a_process_group_ends_through_it():
    scripts = [
        path
        for path in sorted(REPO.glob("[0-9][0-9]_*/**/*.py"))
        if "init_process_group(" in path.read_text() and "solutions" not in path.parts
    ]
    assert len(scripts) >= 15, scripts  # the lessons' DDP scripts, found
    missing = [
        str(path.relative_to(REPO)) for path in scripts if "end_process(" not in path.read_text()
    ]
    assert missing == [], f"these end through Python's teardown: {missing}"
