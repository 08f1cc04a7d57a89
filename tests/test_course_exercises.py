"""The coding exercises: every check passes on its solution and on correct answers
unlike it, says "not attempted" on the learner's untouched file, and fails on a
plausible wrong answer (so the checks can fail); every notebook has a check cell for
each of its exercises."""

import json
import pickle

import psutil
import pytest
from conftest import REPO, is_gone
from exercise_answers import RIGHT, WRONG

from course import exercises
from course.exercises import evaluate, exercise_path, run_in_world, solution_path

# (lesson, exercise, the function the learner writes)
EXERCISES = [
    ("00_intro", "gather_pids", "gather_pids"),
    ("01_theory", "ring", "ring_all_reduce"),
    ("02_multigpu", "accumulate", "accumulation_step"),
    ("02_multigpu", "fp16_hook", "fp16_average_hook"),
    ("03_fault_tolerance", "atomic_save", "save_atomic"),
    ("03_fault_tolerance", "stop_agreement", "all_ranks_agree_to_stop"),
    ("04_multinode", "hostlist", "expand_hostlist"),
    ("04_multinode", "global_rank", "global_rank"),
    ("05_mingpt", "attention", "causal_attention"),
]


@pytest.mark.parametrize("lesson, name, function", EXERCISES)
def test_the_solution_passes_and_the_untouched_exercise_is_not_attempted(lesson, name, function):
    assert evaluate(lesson, name, solution_path(lesson, name)).startswith("correct: ")
    # Recognised from the text (an exercise's world is not started to hear the raise).
    assert exercises.untouched(exercise_path(lesson, name)) == function
    assert exercises.untouched(solution_path(lesson, name)) is None
    verdict = evaluate(lesson, name)
    assert verdict == f"not attempted yet: edit exercises/{name}.py (the TODO in {function})"


def test_an_answer_that_may_return_runs_even_with_the_todo_left_below(tmp_path):
    """An answer written above the TODO's raise runs in its world (and passes); without the
    `return`, it is not attempted, said without starting a world."""
    todo = exercise_path("00_intro", "gather_pids").read_text()
    raise_line = next(line for line in todo.splitlines() if "raise NotImplementedError" in line)
    answer = "    gathered = [torch.zeros_like(mine) for _ in range(world_size)]\n"
    answer += "    dist.all_gather(gathered, mine)\n"
    left_in = tmp_path / "gather_pids.py"
    left_in.write_text(
        todo.replace(raise_line, answer + "    return [int(t) for t in gathered]\n" + raise_line)
    )
    assert evaluate("00_intro", "gather_pids", left_in).startswith("correct: ")
    no_return = tmp_path / "no_return.py"
    no_return.write_text(todo.replace(raise_line, answer + raise_line))
    assert exercises.untouched(no_return) == "gather_pids"


def answer_file(tmp_path, lesson, name, right, replacement):
    """The solution of exercise `name` with `right` replaced (the whole file, when `right`
    is None), written where the check can read it."""
    answer = tmp_path / f"{name}.py"
    if right is None:
        answer.write_text(replacement)
    else:
        solution = solution_path(lesson, name).read_text()
        assert solution.count(right) == 1, f"the solution no longer contains {right!r}"
        answer.write_text(solution.replace(right, replacement))
    return answer


@pytest.mark.parametrize(
    "lesson, name, mistake, right, wrong, message",
    WRONG,
    ids=[f"{name}: {mistake}" for _, name, mistake, *_ in WRONG],
)
def test_a_wrong_answer_fails_its_check(lesson, name, mistake, right, wrong, message, tmp_path):
    with pytest.raises(AssertionError, match=message):
        evaluate(lesson, name, answer_file(tmp_path, lesson, name, right, wrong))


@pytest.mark.parametrize(
    "lesson, name, variant, right, replacement",
    RIGHT,
    ids=[f"{name}: {variant}" for _, name, variant, *_ in RIGHT],
)
def test_a_correct_variant_passes_its_check(lesson, name, variant, right, replacement, tmp_path):
    answer = answer_file(tmp_path, lesson, name, right, replacement)
    assert evaluate(lesson, name, answer).startswith("correct: ")


def test_every_exercise_has_a_check_cell_that_shows_its_solution():
    found = {
        (path.parent.parent.name, path.stem)
        for path in REPO.glob("*/exercises/*.py")
        if path.name != "checks.py"
    }
    assert found == {(lesson, name) for lesson, name, _ in EXERCISES}
    for lesson, name, _ in EXERCISES:
        # A lesson may have several notebooks; one of them holds the exercise.
        code = "\n".join(
            "".join(cell["source"])
            for notebook in sorted((REPO / lesson).glob("*.ipynb"))
            for cell in json.loads(notebook.read_text())["cells"]
            if cell["cell_type"] == "code"
        )
        call = f'exercises.check("{lesson}", "{name}")'
        assert call in code, f"no notebook of {lesson} runs {call}"
        solution = f'("exercises/solutions/{name}.py"'
        assert solution in code, f"no notebook of {lesson} shows exercises/solutions/{name}.py"


def test_a_world_that_hangs_is_stopped_and_leaves_no_process(tmp_path):
    """Rank 0 waits to receive from rank 1, which sleeps outside any collective: the check
    fails after its time limit, says why, and ends every process of the world."""
    runner = tmp_path / "runner.py"
    runner.write_text(
        "import time\n\nimport torch\nimport torch.distributed as dist\n\n\n"
        "def run(exercise):\n"
        "    if dist.get_rank() == 1:\n"
        "        time.sleep(600)\n"
        "    dist.recv(torch.zeros(1), src=1)\n"
    )
    learner = tmp_path / "learner.py"
    learner.write_text("")
    # Only the processes this world starts, not the fork server (it serves every world).
    exercises.forkserver()
    before = set(psutil.Process().children(recursive=True))
    with pytest.raises(AssertionError, match=r"(?s)failed on rank 0:.*Timed out"):
        run_in_world(learner, (runner, "run"), world_size=2, timeout=5)
    left = set(psutil.Process().children(recursive=True)) - before
    assert [process for process in left if not is_gone(process.pid)] == []


def test_a_world_that_fails_to_start_is_not_blamed_on_the_answer(tmp_path):
    # A store path that cannot be one: the world fails in its set-up, before any answer.
    store = tmp_path / "store"
    store.mkdir()
    answer = tmp_path / "answer0"
    exercises._world_worker(
        "x", "y", str(tmp_path / "a.py"), 0, 1, str(store), 5, str(answer), None
    )
    kind, error = pickle.loads(answer.read_bytes())
    assert kind == "error" and error.startswith(exercises.SETUP_FAILED)
    # Even when a peer had returned and gloo saw its connection close, the message says
    # the set-up failed, not that the peer skipped a collective.
    peer = tmp_path / "answer1"
    peer.write_bytes(pickle.dumps(("result", None)))
    message = exercises._failure(0, f"{error}\nConnection closed by peer", [answer, peer])
    assert message.startswith("on rank 0, the gloo world failed to start")
    assert "never joined" not in message
