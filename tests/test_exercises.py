"""The coding exercises: every check passes on its solution, says "not attempted" on
the learner's untouched file, and fails on a plausible wrong answer (so the checks
can fail); every notebook has a check cell for each of its exercises."""

import json

import psutil
import pytest
from conftest import REPO, is_gone

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

# Plausible mistakes, each made by editing the solution: (lesson, exercise, what the
# mistake is, text of the solution, replaced by, what the failed check must say); with
# None for the text of the solution, the mistake is a whole file.
WRONG = [
    (
        "00_intro",
        "gather_pids",
        "ignores what all_gather received",
        "return [int(pid) for pid in everyone]",
        "return [int(mine)] * world_size",
        r"rank \d: expected the pids of ranks 0..1",
    ),
    (
        "01_theory",
        "ring",
        "forgets the all-gather",
        "        pass_right(chunks, sending, add=False)",
        "        pass",
        r"then 1 with add=False \(all-gather\); yours called pass_right with add=\[True\]",
    ),
    (
        "01_theory",
        "ring",
        "sends the wrong chunk in the reduce-scatter",
        "sending = [(rank - step) % world_size",
        "sending = [(rank + step) % world_size",
        r"N = 3 ranks, .*: rank \d should hold the sum",
    ),
    (
        "02_multigpu",
        "accumulate",
        "all-reduces in every micro-batch's backward",
        "sync = contextlib.nullcontext() if last else model.no_sync()",
        "sync = contextlib.nullcontext()",
        r"rank \d: DDP all-reduced the gradients 12 times in 3 steps of 4 micro-batches",
    ),
    (
        "02_multigpu",
        "fp16_hook",
        "sends the sum, not the average",
        "compressed = buffer.to(torch.float16).div_(dist.get_world_size(group))",
        "compressed = buffer.to(torch.float16)",
        r"rank \d: the weights differ from one process .* is the bucket divided by the world",
    ),
    (
        "02_multigpu",
        "fp16_hook",
        "sends float32",
        "compressed = buffer.to(torch.float16).div_(",
        "compressed = buffer.clone().div_(",
        r"rank \d: your hook handed all_reduce tensors of \['torch.float32'\]; expected float16",
    ),
    (
        "02_multigpu",
        "accumulate",
        "adds up the micro-batches' losses instead of averaging them",
        " / len(micro_batches)",
        "",
        r"rank \d: the weights differ from one process trained on the whole batches",
    ),
    (
        "03_fault_tolerance",
        "atomic_save",
        "writes in place, as the official series does",
        None,
        "import torch\n\n\ndef save_atomic(state, path):\n    torch.save(state, path)\n",
        r"after a save interrupted half-way, snapshot.pt cannot be loaded",
    ),
    (
        "03_fault_tolerance",
        "atomic_save",
        "deletes the old snapshot, then writes the new one",
        '    with open(temporary, "wb") as file:',
        '    path.unlink(missing_ok=True)\n    with open(temporary, "wb") as file:',
        r"after a save interrupted half-way, snapshot.pt cannot be loaded",
    ),
    (
        "03_fault_tolerance",
        "atomic_save",
        "copies the temporary file over the snapshot instead of renaming it",
        "    os.replace(temporary, path)",
        "    import shutil\n\n    shutil.copyfile(temporary, path)\n    temporary.unlink()",
        r"the second snapshot is the same file \(same inode\) as the first",
    ),
    (
        "03_fault_tolerance",
        "stop_agreement",
        "answers from its own flag",
        "    dist.all_reduce(flag, op=dist.ReduceOp.MAX)\n",
        "",
        r"rank 0: answered \[False(, False){7}\], stopping at step None",
    ),
    (
        "03_fault_tolerance",
        "stop_agreement",
        "waits until every rank is asked (MIN)",
        "op=dist.ReduceOp.MAX",
        "op=dist.ReduceOp.MIN",
        r"rank 0: answered \[False(, False){7}\], stopping at step None",
    ),
    (
        "04_multinode",
        "hostlist",
        "splits at every comma, brackets or not",
        "position = match.end() + 1",
        "position = match.end() + 1\n        break",
        r"expand_hostlist\('node\[01-03,07\],gpu5'\): expected",
    ),
    (
        "04_multinode",
        "hostlist",
        "drops the leading zeros",
        'hosts.append(f"{prefix}{number:0{width}d}{suffix}")',
        'hosts.append(f"{prefix}{number}{suffix}")',
        r"expected \['node01', 'node02', 'node03', 'node07', 'gpu5'\], got \['node1'",
    ),
    (
        "04_multinode",
        "global_rank",
        "assumes every node runs as many processes as this one",
        "return sum(nproc_per_node[:node_rank]) + local_rank",
        "return node_rank * nproc_per_node[node_rank] + local_rank",
        r"nodes running \[3, 1\] processes: node 1's local rank 0 is global rank 3, got 1",
    ),
    (
        "05_mingpt",
        "attention",
        "adds a float mask of ones (the official minGPT's mistake)",
        'scores = scores.masked_fill(future, float("-inf"))',
        "scores = scores + torch.ones(time, time).tril()",
        r"moved the outputs at positions 0..0 .*the attention sees the future",
    ),
    (
        "05_mingpt",
        "attention",
        "forgets the scale",
        " * head_size**-0.5",
        "",
        r"differs from scaled_dot_product_attention\(is_causal=True\)",
    ),
]


@pytest.mark.parametrize("lesson, name, function", EXERCISES)
def test_the_solution_passes_its_check(lesson, name, function):
    assert evaluate(lesson, name, solution_path(lesson, name)).startswith("correct: ")


@pytest.mark.parametrize("lesson, name, function", EXERCISES)
def test_the_untouched_exercise_is_not_attempted(lesson, name, function):
    verdict = evaluate(lesson, name)
    assert verdict == f"not attempted yet: edit exercises/{name}.py (the TODO in {function})"


@pytest.mark.parametrize(
    "lesson, name, mistake, right, wrong, message",
    WRONG,
    ids=[f"{name}: {mistake}" for _, name, mistake, *_ in WRONG],
)
def test_a_wrong_answer_fails_its_check(lesson, name, mistake, right, wrong, message, tmp_path):
    answer = tmp_path / f"{name}.py"
    if right is None:
        answer.write_text(wrong)
    else:
        solution = solution_path(lesson, name).read_text()
        assert solution.count(right) == 1, f"the solution no longer contains {right!r}"
        answer.write_text(solution.replace(right, wrong))
    with pytest.raises(AssertionError, match=message):
        evaluate(lesson, name, answer)


def test_every_exercise_has_a_solution_a_test_and_a_check_cell():
    found = {
        (path.parent.parent.name, path.stem)
        for path in REPO.glob("*/exercises/*.py")
        if path.name != "checks.py"
    }
    assert found == {(lesson, name) for lesson, name, _ in EXERCISES}
    for lesson, name, _ in EXERCISES:
        assert exercise_path(lesson, name).is_file() and solution_path(lesson, name).is_file()
        # A lesson may have several notebooks; one of them holds the exercise.
        code = [
            "".join(cell["source"])
            for notebook in sorted((REPO / lesson).glob("*.ipynb"))
            for cell in json.loads(notebook.read_text())["cells"]
            if cell["cell_type"] == "code"
        ]
        call = f'exercises.check("{lesson}", "{name}")'
        assert any(call in source for source in code), f"no notebook of {lesson} runs {call}"
        solution = f'("exercises/solutions/{name}.py"'
        assert any(solution in source for source in code), (
            f"no notebook of {lesson} shows exercises/solutions/{name}.py"
        )


def test_a_world_that_deadlocks_is_stopped_and_leaves_no_process(tmp_path):
    """Both ranks wait to receive from each other: the check fails after its time
    limit, says why (the first rank to time out ends, and the other sees its peer
    gone, whichever comes first), and no process of the world outlives it."""
    runner = tmp_path / "runner.py"
    runner.write_text(
        "import torch\nimport torch.distributed as dist\n\n\n"
        "def run(exercise):\n"
        "    dist.recv(torch.zeros(1), src=1 - dist.get_rank())\n"
    )
    learner = tmp_path / "learner.py"
    learner.write_text("")
    # Only the processes this world starts: others of this test worker are not ours.
    before = set(psutil.Process().children(recursive=True))
    with pytest.raises(
        AssertionError, match=r"(?s)failed on rank \d:.*(Timed out|Connection closed)"
    ):
        run_in_world(learner, (runner, "run"), world_size=2, timeout=5)
    left = set(psutil.Process().children(recursive=True)) - before
    assert [process for process in left if not is_gone(process.pid)] == []
