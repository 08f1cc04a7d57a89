"""common.distributed.end_process: the exit of every lesson script that joins a process
group. It must keep what a normal exit does (buffered output written, exit handlers
run, the exit code) and leave out only the interpreter's teardown."""

import os
import subprocess

import pytest
from conftest import PYTHON, REPO, lesson_scripts

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
end_process(3)
print("not reached")
"""


@pytest.mark.parametrize("teardown", ["", "python"], ids=["end_process", "COURSE_TEARDOWN=python"])
def test_output_exit_handlers_and_the_exit_code_survive_and_the_teardown_is_skipped(teardown):
    """COURSE_TEARDOWN=python: the stress script's switch (--python_teardown), the old ending."""
    variables = {name: value for name, value in os.environ.items() if name != "COURSE_TEARDOWN"}
    # Output to a pipe is block-buffered: nothing is written before end_process flushes.
    result = subprocess.run(
        [PYTHON, "-c", SCRIPT],
        capture_output=True,
        text=True,
        timeout=120,
        env=variables | ({"COURSE_TEARDOWN": teardown} if teardown else {}),
    )
    assert result.returncode == 3  # the one given, not a normal exit's 0
    ran = "buffered, not flushedexit handler ran\n"
    assert result.stdout == ran + ("teardown ran\n" if teardown else "")
    assert result.stderr == "to stderr"


def test_every_lesson_script_that_joins_a_process_group_ends_through_it():
    scripts = [path for path in lesson_scripts() if "init_process_group(" in path.read_text()]
    assert len(scripts) >= 15, scripts  # the lessons' DDP scripts, found
    missing = [
        str(path.relative_to(REPO)) for path in scripts if "end_process(" not in path.read_text()
    ]
    assert missing == [], f"these end through Python's teardown: {missing}"
