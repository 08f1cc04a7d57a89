"""Every lesson script, launched wrong, answers in one line and exits non-zero. The scripts
are found on disk (every lesson `.py` with a `__main__` block), so a new one is held to it
at once. The commands run through `run_forked` (conftest): ~100 launches take seconds."""

import json
import re
import shlex
import subprocess
from pathlib import Path

import pytest
from conftest import PYTHON, REPO, lesson_module, lesson_scripts, made_once, run_forked

from course.launches import LAUNCHES

SCRIPTS = [path.relative_to(REPO).as_posix() for path in lesson_scripts()]
# The smallest correct arguments (as a learner would type them) of the scripts that need
# some; every other lesson script is correct with none.
NEEDED_ARGUMENTS = {
    "01_theory/ddp_profile.py": ["--out", "traces"],
    "02_multigpu/ddp_options/ddp_checkpoints.py": ["--folder", "checkpoints"],
    "02_multigpu/multigpu.py": ["20", "5"],
    "02_multigpu/single_gpu.py": ["20", "5"],
    "03_fault_tolerance/multigpu_preemptible.py": ["20", "5"],
    "03_fault_tolerance/multigpu_torchrun.py": ["20", "5"],
    "03_fault_tolerance/rendezvous_server.py": ["29400"],
    "04_multinode/hangs/classic_hangs.py": ["--case", "order"],
    "04_multinode/multinode.py": ["50", "10"],
    "05_mingpt/benchmark.py": ["throughput"],
}
CORRECT_ARGUMENTS = {script: NEEDED_ARGUMENTS.get(script, []) for script in SCRIPTS}

HANGS = "04_multinode/hangs"
# Wrong values, each with the words that must name what is wrong: each way a script checks
# a value, once (positive_int's 0, negatives and words: tests/test_common.py).
WRONG_VALUES = [
    ("02_multigpu/single_gpu.py", ["20"], "the following arguments are required: save_every"),
    ("02_multigpu/single_gpu.py", ["20", "0"], "argument save_every: '0' is not a positive"),
    ("02_multigpu/multigpu.py", ["20", "5", "--gpus", "2"], "unrecognized arguments: --gpus 2"),
    ("02_multigpu/uneven_inputs.py", ["--batches", "0"], "--batches must be >= 1"),
    ("02_multigpu/scaling.py", ["--epochs", "1"], "--epochs 1 is too small"),
    ("02_multigpu/ddp_options/comm_hooks.py", ["--steps", "2"], "--steps 2 is too few"),
    ("02_multigpu/ddp_options/ddp_compile.py", ["--backend", "xla"], "--backend xla is not one"),
    ("02_multigpu/ddp_options/ddp_checkpoints.py", [], "the following arguments are required: --f"),
    ("01_theory/ring_allreduce.py", ["--max-size", "3XB"], "is not a size such as 4KB"),
    ("01_theory/ring_allreduce.py", ["--piece-size", "big"], "'big' is not a size such as"),
    ("01_theory/ddp_buckets.py", ["--caps", "0"], "is not a positive number of MB or 'default'"),
    ("01_theory/ddp_profile.py", [], "the following arguments are required: --out"),
    ("01_theory/ddp_step_times.py", ["--caps", "nan"], "--caps: 'nan' is not a positive number of"),
    ("00_intro/hello_torchrun.py", ["--epochs", "3"], "unrecognized arguments: --epochs 3"),
    ("05_mingpt/main.py", ["trainer.max_epoch=3"], "unknown setting trainer.max_epoch: Key"),
    ("05_mingpt/main.py", ["trainer.sample_prompt="], "bad value for trainer.sample_prompt:"),
    ("05_mingpt/main.py", ["data.val_fraction=0"], "data.val_fraction=0.0 must be > 0"),
    (
        "05_mingpt/main.py",
        ["optimizer.warmup_steps=100000"],
        "optimizer.warmup_steps=100000 is not shorter than the schedule (",
    ),
    (f"{HANGS}/classic_hangs.py", ["--case", "deadlock"], "--case: invalid choice: 'dead"),
    (
        f"{HANGS}/classic_hangs.py",
        ["--case", "order", "--timeout", "0"],
        "--timeout: '0' is not a positive number of seconds",
    ),
    (f"{HANGS}/classic_hangs.py", ["--case", "killed_rank", "--fixed"], "--fixed is for"),
    (f"{HANGS}/one_collective_too_many.py", ["--timeout", "-1"], "'-1' is not a positive"),
    ("04_multinode/node_report.py", ["--timeout", "nan"], "--timeout: 'nan' is not a positive"),
]

SCRIPTS_PAGE = (REPO / "docs" / "scripts.md").read_text(encoding="utf-8")


def documented_lesson_commands() -> list[tuple[str, list[str]]]:
    """(script, arguments) of each command in docs/scripts.md's block of lesson commands."""
    block = SCRIPTS_PAGE.split("The commands of each lesson, from the repository folder:")[1]
    block = block.split("```bash\n", 1)[1].split("```", 1)[0].replace("\\\n", " ")
    commands = []
    for line in block.splitlines():
        words = [word for word in shlex.split(line) if not re.fullmatch(r"[A-Z_]+=\S*", word)]
        script = next(i for i, word in enumerate(words) if word.endswith(".py"))
        commands.append((words[script], words[script + 1 :]))
    return commands


DOCUMENTED_COMMANDS = documented_lesson_commands()
# docs/scripts.md's example of a script started the wrong way, and what it prints.
DOCUMENTED_REFUSAL = re.search(r"```console\n\$ \.venv/bin/python (\S+)\n(.+)\n```", SCRIPTS_PAGE)

# Commands also run by a real interpreter, to show the forked runner gives the same: a
# refusal of the script's own (exit 1) and one of argparse's (exit 2).
COMPARED_SCRIPT = "00_intro/hello_torchrun.py"
COMPARED_ARGUMENTS = [[], ["--bogus"]]


def is_torchrun_script(script: str) -> bool:
    """True for the scripts that torchrun starts: they read what torchrun sets."""
    text = (REPO / script).read_text()
    return "torchrun_env(" in text or "require_torchrun(" in text


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    """{(script, arguments): result} of every command of this module, run once per test
    run (conftest.made_once: xdist's workers take this module's tests in turns)."""
    commands = [(s, a + ["--bogus"]) for s, a in CORRECT_ARGUMENTS.items()]
    commands += [(s, a) for s, a in CORRECT_ARGUMENTS.items() if is_torchrun_script(s)]
    commands += [(script, arguments) for script, arguments, _ in WRONG_VALUES]
    commands += [(COMPARED_SCRIPT, arguments) for arguments in COMPARED_ARGUMENTS]
    # `--bogus` last: argparse names an unknown option only once every other one parsed.
    commands += [(launch.script, launch_arguments(launch) + ["--bogus"]) for launch in LAUNCHES]
    commands += [(script, arguments + ["--bogus"]) for script, arguments in DOCUMENTED_COMMANDS]
    commands += [(DOCUMENTED_REFUSAL[1], [])]
    commands = list(dict.fromkeys((s, tuple(a)) for s, a in commands))  # each once

    def launch_all(folder):
        work = folder / "work"
        work.mkdir()
        results = run_forked([(REPO / script, arguments) for script, arguments in commands], work)
        assert list(work.iterdir()) == []  # a refused launch writes nothing (no checkpoint)
        (folder / "results.json").write_text(json.dumps(results))

    results = json.loads(
        (made_once(tmp_path_factory, "launched_wrong", launch_all) / "results.json").read_text()
    )
    return dict(zip(commands, results, strict=True))


def launch_arguments(launch) -> list[str]:
    """A `course/launches.py` entry's arguments, mp.spawn's `--world_size` included."""
    spawned = ["--world_size", "2"] if launch.launcher == "spawn" else []
    return [*launch.arguments, *spawned]


def refusal(launched, script: str, arguments, status: int) -> str:
    """The refusal's line, after checking it is the only output and the exit status."""
    result = launched[script, tuple(arguments)]
    assert result["status"] == status, result
    assert result["stdout"] == "", result
    assert result["stderr"].count("\n") == 1, result["stderr"]
    return result["stderr"]


def parses(launched, script: str, arguments) -> None:
    """The arguments parse: argparse got as far as the `--bogus` after them."""
    line = refusal(launched, script, [*arguments, "--bogus"], status=2)
    assert line.startswith(f"{Path(script).name}: unrecognized arguments: --bogus;"), line


def launch_hint(line: str) -> str:
    """The command a refusal tells the learner to use."""
    return line.split("; launch it as: ", 1)[1].rstrip("\n")


def hint_for(script: str, launched) -> str:
    """The command the script gives for an unknown option, checked to start the script
    the way it must be started: torchrun for the scripts torchrun starts, else python."""
    hint = launch_hint(launched[script, (*CORRECT_ARGUMENTS[script], "--bogus")]["stderr"])
    launcher = "torchrun " if is_torchrun_script(script) else "python "
    assert hint.startswith(launcher) and f" {Path(script).name}" in hint, hint
    return hint


@pytest.mark.parametrize("script", SCRIPTS)
def test_an_unknown_option_is_one_line_with_the_launch_command(script, launched):
    line = refusal(launched, script, [*CORRECT_ARGUMENTS[script], "--bogus"], status=2)
    hint = hint_for(script, launched)
    assert line == f"{Path(script).name}: unrecognized arguments: --bogus; launch it as: {hint}\n"


@pytest.mark.parametrize("launch", LAUNCHES, ids=lambda launch: launch.name)
def test_the_arguments_the_gpu_mode_and_the_stress_script_give_parse(launch, launched):
    """Each entry of course/launches.py is launched only on a GPU machine or by the stress
    script: a renamed option would break them silently."""
    parses(launched, launch.script, launch_arguments(launch))


@pytest.mark.parametrize("script", [s for s in SCRIPTS if is_torchrun_script(s)])
def test_plain_python_says_it_needs_torchrun_and_how_to_launch_it(script, launched):
    line = refusal(launched, script, CORRECT_ARGUMENTS[script], status=1)
    assert f"{Path(script).name} must be started by torchrun" in line
    assert launch_hint(line) == hint_for(script, launched)


@pytest.mark.parametrize("script, arguments, complaint", WRONG_VALUES)
def test_a_wrong_value_is_one_line_naming_it(script, arguments, complaint, launched):
    line = refusal(launched, script, arguments, status=2)
    assert complaint in line
    assert launch_hint(line) == hint_for(script, launched)


@pytest.mark.parametrize("arguments", COMPARED_ARGUMENTS)
def test_the_forked_runner_gives_what_the_interpreter_gives(arguments, launched, tmp_path):
    """The shortcut above is honest: the same command, run by a real interpreter,
    exits with the same status and prints the same text."""
    real = subprocess.run(
        [PYTHON, REPO / COMPARED_SCRIPT, *arguments], capture_output=True, text=True, cwd=tmp_path
    )
    forked = launched[COMPARED_SCRIPT, tuple(arguments)]
    assert [forked[key] for key in ("status", "stdout", "stderr")] == [
        real.returncode, real.stdout, real.stderr
    ]  # fmt: skip


def test_the_documented_lesson_commands_name_scripts_and_arguments_that_parse(launched):
    assert len(DOCUMENTED_COMMANDS) >= 7 and {s for s, _ in DOCUMENTED_COMMANDS} <= set(SCRIPTS)
    for script, arguments in DOCUMENTED_COMMANDS:
        parses(launched, script, arguments)


def test_the_documented_lesson_05_settings_are_settings_of_main_py():
    config = lesson_module("05_mingpt", "config")
    for script, arguments in DOCUMENTED_COMMANDS:
        if script == "05_mingpt/main.py":
            config.load_config(REPO / "05_mingpt" / "train_cfg.yaml", arguments)  # or ConfigError


def test_the_documented_refusal_is_what_the_script_prints(launched):
    script, printed = DOCUMENTED_REFUSAL.groups()
    assert refusal(launched, script, [], status=1) == printed + "\n"
