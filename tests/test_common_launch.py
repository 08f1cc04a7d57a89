"""The launch helper: a cell fails when its command fails, a hang is killed at its time
limit, and nothing the command started outlives it. (`kill_worker`: 03's check cell.)"""

import re
import shlex
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import PYTHON, REPO, SCRIPTS, is_gone, pids_in

from common.command_line import on_this_machine_only, resolve
from common.launch import CommandFailed, CommandTimedOut, run, start
from common.output import LineStream


def hanging():
    """orphan_maker's parent and child, both started: from now on it can only hang."""
    command = start(f"python {SCRIPTS / 'orphan_maker.py'} hang", quiet=True)
    command.wait_for(r"^child pid \d+$", timeout=60)
    return command


def both_gone(output: str) -> bool:
    """The two pids orphan_maker printed, both ended."""
    pids = pids_in(output)
    return len(pids) == 2 and all(is_gone(pid) for pid in pids)


def test_streams_output_and_returns_it(capsys):
    output = run("python -c \"print('first'); print('second')\"")
    assert output == "first\nsecond\n"
    shown = capsys.readouterr().out
    # The command as typed, then its output as it came.
    assert shown == "$ python -c \"print('first'); print('second')\"\nfirst\nsecond\n"


def test_python_and_torchrun_come_from_the_kernels_environment():
    # The same environment (a venv's prefix), whichever `python` comes first on PATH.
    assert run("python -c 'import sys; print(sys.prefix)'", quiet=True).strip() == sys.prefix
    # torchrun runs as `python -m torch.distributed.run` of this very interpreter.
    module = [PYTHON, "-m", "torch.distributed.run"]
    assert resolve(["torchrun", "--standalone", "job.py"]) == [*module, "--standalone", "job.py"]


def test_a_failed_command_raises_with_its_status_its_output_and_its_last_lines():
    # nbmake's and CI's logs show the exception, not the cell's output: the last 15 of 41.
    script = "import sys\nfor i in range(40): print(f'line {i}')\n"
    script += "print('the reason', file=sys.stderr); raise SystemExit(3)"
    with pytest.raises(CommandFailed, match="exited with status 3") as failure:
        run(f'python -c "{script}"', quiet=True)
    assert failure.value.output == "".join(f"line {i}\n" for i in range(40)) + "the reason\n"
    message = str(failure.value)
    assert message.endswith("line 38\nline 39\nthe reason")
    assert "last 15 lines" in message and "line 26" in message and "line 25" not in message


def test_expected_failure_must_fail():
    output = run("python -c \"raise SystemExit('boom')\"", expect_failure=True, quiet=True)
    assert output.strip() == "boom"
    with pytest.raises(CommandFailed, match="expected to fail"):
        run("python -c 'pass'", expect_failure=True, quiet=True)


def test_port_placeholder_becomes_a_free_port():
    port = int(run("python -c 'import sys; print(sys.argv[1])' {port}", quiet=True))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))  # raises if the port were taken


@pytest.fixture
def short_grace(monkeypatch):
    """orphan_maker's child ignores SIGTERM: it ends at the SIGKILL after the grace period."""
    monkeypatch.setattr("common.processes.GRACE_SECONDS", 0.5)


@pytest.mark.parametrize("wait", ["wait", "wait_for"])
def test_a_hang_in_a_new_session_is_killed_at_the_time_limit(short_grace, wait):
    command = hanging()
    with pytest.raises(CommandTimedOut) as timeout:
        command.wait(timeout=1) if wait == "wait" else command.wait_for("never", timeout=1)
    said = "did not end" if wait == "wait" else "printed no line matching 'never'"
    assert f"{said} within its time limit of 1 s; killed" in str(timeout.value)
    assert both_gone(timeout.value.output)


def test_orphans_left_by_a_finished_command_are_killed(short_grace):
    # The child holds the output pipe open after its parent exits: without the
    # clean-up, run() would wait for it until the time limit.
    assert both_gone(run(f"python {SCRIPTS / 'orphan_maker.py'} exit", timeout=60, quiet=True))


def test_interrupt_kills_the_workers_and_reraises():
    """The stop button sends SIGINT to the kernel: run() kills the workers and re-raises."""
    script = SCRIPTS / "hanging_workers.py"
    code = (
        # SIGINT raises KeyboardInterrupt, as in a Jupyter kernel, even if this test's
        # process ignores or blocks it (its children would inherit that).
        "import faulthandler, signal\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})\n"
        "faulthandler.register(signal.SIGUSR1)  # its stacks, if it hangs all the same\n"
        "from common.launch import run\n"
        f"run('torchrun --standalone --nproc_per_node=2 {script}', timeout=300)\n"
    )
    kernel = subprocess.Popen(
        [PYTHON, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO
    )
    seen = []
    for line in kernel.stdout:  # wait until both workers have reported
        seen += pids_in(line)
        if len(seen) == 2:
            break
    kernel.send_signal(signal.SIGINT)
    try:
        _, stderr = kernel.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        kernel.send_signal(signal.SIGUSR1)
        try:
            _, stderr = kernel.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            kernel.kill()
            _, stderr = kernel.communicate()
        pytest.fail(f"not ended 60 s after SIGINT; its stacks then:\n{stderr[-5000:]}")
    assert kernel.returncode != 0
    assert stderr.strip().splitlines()[-1] == "KeyboardInterrupt"
    assert all(is_gone(pid) for pid in seen)


def test_background_commands_wait_for_a_line_then_end_each_with_its_own_output(capsys):
    first = start("python -c \"print('step 1'); print('step 2')\"", label="a")
    other = start("python -c \"print('other')\"", label="b", quiet=True)
    assert first.wait_for(r"step \d", timeout=60) == "step 1\n"
    assert first.wait_for("step 2", timeout=60) == "step 2\n"
    assert other.wait(timeout=60) == "other\n"
    assert first.wait(timeout=60) == "step 1\nstep 2\n"
    shown = capsys.readouterr().out
    assert "[a] step 1\n[a] step 2\n" in shown  # each line labelled with its command


def test_waiting_for_a_line_that_never_comes_fails_when_the_command_ends():
    command = start("python -c \"print('something else')\"", quiet=True)
    with pytest.raises(CommandFailed, match="ended \\(status 0\\) before printing a line"):
        command.wait_for("epoch 3", timeout=60)


def test_a_failed_wait_kills_every_running_command():
    other = hanging()
    failing = start("python -c 'raise SystemExit(3)'", quiet=True)
    with pytest.raises(CommandFailed, match="exited with status 3"):
        failing.wait(timeout=60)
    assert both_gone(other.output)


def test_without_record_the_report_has_no_traceback_and_torchruns_folder_is_removed(tmp_path):
    """Without @record torchrun's report has no traceback (with it: tests/test_03_record.py).
    `start` removes torchrun's folder of error files (its default stays in the temporary
    folder), also when torchrun runs inside a wrapper (lesson 04's `ip netns exec ... sh -c`)."""
    children_temp = tmp_path / "temp"  # where torchrun would put its default folder
    children_temp.mkdir()
    script = f"torchrun --standalone --nproc_per_node=1 {SCRIPTS / 'raises_in_worker.py'}"
    wrapped = shlex.quote("exec " + shlex.join(resolve(shlex.split(script))))
    output = run(
        f"sh -c {wrapped}", env={"TMPDIR": str(children_temp)}, expect_failure=True, quiet=True
    )
    report = output.split("Root Cause (first observed failure)")[1]
    assert "error_file: <N/A>" in report and "ValueError" not in report
    error_file = Path(re.search(r"^TORCHELASTIC_ERROR_FILE (\S+)$", output, re.M)[1])
    logs = error_file.parents[3]  # logs/<run id>/attempt_0/<local rank>/error.json
    assert logs.name.startswith("torchrun-logs-"), error_file
    assert not logs.exists()
    assert list(children_temp.iterdir()) == []


def test_a_command_started_from_a_kernel_writes_plain_text(monkeypatch, tmp_path):
    """A kernel's FORCE_COLOR=1 does not reach the command (Python's own switch and the
    common convention say no colour), and escape codes a tool writes anyway are removed."""
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("CLICOLOR_FORCE", "1")
    show = "import os; print(sorted((k, v) for k, v in os.environ.items() if 'COLO' in k))"
    seen = run(f'python -c "{show}"', quiet=True)
    assert seen.strip() == "[('NO_COLOR', '1'), ('PYTHON_COLORS', '0')]"
    output = run("python -c \"raise KeyError(('0', 0))\"", quiet=True, expect_failure=True)
    assert "KeyError: ('0', 0)" in output and "\x1b" not in output  # on any Python
    # What Python 3.13 prints for it under FORCE_COLOR, read by lesson 04's hangs check.
    coloured = "\x1b[1;35mKeyError\x1b[0m: \x1b[35m('0', 0)\x1b[0m"
    (tmp_path / "coloured.py").write_text(f"print({coloured!r})\n")
    assert run(f"python {tmp_path / 'coloured.py'}", quiet=True) == "KeyError: ('0', 0)\n"


def test_a_line_stream_shows_whole_lines_only(capsys):
    stream = LineStream(prefix="[job] ")
    stream.add("first li")
    assert capsys.readouterr().out == ""  # half a line is kept, not shown
    stream.add("ne\nsecond line\nthi")
    assert capsys.readouterr().out == "[job] first line\n[job] second line\n"
    stream.end()  # the last line had no newline: shown, and ended on screen
    assert capsys.readouterr().out == "[job] thi\n"
    assert stream.text == "first line\nsecond line\nthi"  # kept exactly as it came


@pytest.mark.parametrize(
    "arguments, local",
    [
        ("--standalone --nproc_per_node=2 job.py", True),
        ("--nnodes=2 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:29400 job.py", True),
        ("--nnodes=2 --rdzv-endpoint localhost:29400 job.py", True),
        ("--nnodes=2 --rdzv_endpoint=node1:29400 job.py", False),
        ("--nnodes=2 --node_rank=0 --master_addr=127.0.0.1 job.py", False),
    ],
)
def test_torchrun_gets_127_0_0_1_only_when_all_its_agents_are_here(arguments, local):
    assert on_this_machine_only(arguments.split()) == local
