"""Coding exercises: check a learner's answer from a notebook cell.

Used by the "Exercises" section of every lesson notebook, and by
`tests/test_course_exercises.py`, which runs every check against the solutions.

Each lesson folder has an `exercises/` folder:

- `<name>.py`: the learner's file. It states the task and holds a function whose body
  still says `raise NotImplementedError`: the TODO;
- `checks.py`: one function per exercise, `<name>(path)`, which tries the file at
  `path` and returns what it proved, or raises AssertionError saying what was
  expected and what came back;
- `solutions/<name>.py`: a worked answer.

`exercises.check("02_multigpu", "accumulate")` (after `from course import exercises`)
in a notebook prints one line:

- `not attempted yet: ...` while the function still raises NotImplementedError (the
  cell passes, so a notebook whose exercises are untouched still runs clean);
- `correct: ...` when the answer passes the check;
- and fails the cell with an AssertionError that says what is wrong otherwise.

The learner's file is read afresh at every check, so an edit counts at once, with no
kernel restart. Exercises that need a process group run the learner's function in a
small gloo world on this machine (`run_in_world`); an untouched one is recognised from its
text first (`untouched`), without starting a world. The world's processes are forks of one
that imported torch once (`forkserver`): a world starts in a fraction of a second.
"""

import ast
import importlib.util
import multiprocessing
import multiprocessing.forkserver
import os
import pickle
import tempfile
import time
import traceback
from datetime import timedelta
from pathlib import Path
from types import ModuleType

from common.output import plain_text

REPO = Path(__file__).resolve().parent.parent
# How long the processes of an exercise's world may take to start Python and torch.
STARTUP_SECONDS = 120


class NotAttempted(Exception):
    """The learner's function still raises NotImplementedError."""

    def __init__(self, function: str):
        super().__init__(function)
        self.function = function


def exercise_path(lesson: str, name: str) -> Path:
    """The learner's file of exercise `name` in lesson folder `lesson`."""
    return REPO / lesson / "exercises" / f"{name}.py"


def solution_path(lesson: str, name: str) -> Path:
    return REPO / lesson / "exercises" / "solutions" / f"{name}.py"


def load(path: str | Path) -> ModuleType:
    """Import the file at `path` as a fresh module (never a cached copy)."""
    path = Path(path)
    spec = importlib.util.spec_from_file_location(f"exercise_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _raised_in(error: BaseException, path: Path) -> str:
    """The name of the function of `path` that raised `error` (the innermost one)."""
    names = [
        frame.name
        for frame in traceback.extract_tb(error.__traceback__)
        if Path(frame.filename).resolve() == path.resolve()
    ]
    return names[-1] if names else "?"


def evaluate(lesson: str, name: str, path: str | Path | None = None) -> str:
    """Run exercise `name`'s check on the file at `path` (default: the learner's file)
    and return the one-line verdict. Raises AssertionError when the answer is wrong."""
    path = Path(path) if path is not None else exercise_path(lesson, name)
    checks = load(REPO / lesson / "exercises" / "checks.py")
    try:
        proved = getattr(checks, name)(path)
    except NotImplementedError as error:
        function = _raised_in(error, path)
    except NotAttempted as error:
        function = error.function
    else:
        return f"correct: {proved}"
    return f"not attempted yet: edit exercises/{name}.py (the TODO in {function})"


def check(lesson: str, name: str) -> None:
    """The notebook's check cell: print the verdict on the learner's answer."""
    print(evaluate(lesson, name))


# -- a gloo world for exercises that need a process group ------------------------------


def untouched(path: str | Path) -> str | None:
    """The function of the learner's file that must still raise NotImplementedError when
    called: the raise is in its body (or a loop's or a `with`'s there, not under an `if`),
    and no `return` comes before it. None if there is none: then the answer runs, and says
    for itself whether it is done."""
    for function in ast.walk(ast.parse(Path(path).read_text())):
        if isinstance(function, ast.FunctionDef):
            todo = next((s for s in _unconditional(function.body) if _raises_todo(s)), None)
            returns = [s for s in ast.walk(function) if isinstance(s, (ast.Return, ast.Yield))]
            if todo is not None and all(s.lineno > todo.lineno for s in returns):
                return function.name
    return None


def _unconditional(statements):
    for statement in statements:
        yield statement
        if isinstance(statement, (ast.For, ast.With)):
            yield from _unconditional(statement.body)


def _raises_todo(statement) -> bool:
    return isinstance(statement, ast.Raise) and "NotImplementedError" in ast.unparse(statement)


def _world_worker(runner_file, runner_name, path, rank, world_size, store, timeout, answer, log):
    """One process of the world: run the check's runner on the learner's module and
    write (kind, value) to the file `answer`; what it prints goes to the file `log`."""
    import torch
    import torch.distributed as dist

    if log is not None:  # the file descriptors, so that gloo's own lines go there too
        with open(log, "w") as opened:
            os.dup2(opened.fileno(), 1)
            os.dup2(opened.fileno(), 2)
    # The server's environment is the one it started with: plain text (for the tracebacks).
    os.environ.update(plain_text(os.environ))
    torch.set_num_threads(1)  # N processes share the cores
    outcome = None
    started = False  # the exercise itself, after the world's set-up
    try:
        # Wait for every process to have started Python and torch (slow on a busy
        # machine) before the clock of `timeout` starts: it is for the exercise.
        rendezvous = dist.FileStore(store, world_size)
        rendezvous.set_timeout(timedelta(seconds=STARTUP_SECONDS))
        _all_ranks_reach(rendezvous, "started", rank, world_size)
        dist.init_process_group(
            "gloo",
            store=rendezvous,
            rank=rank,
            world_size=world_size,
            timeout=timedelta(seconds=timeout),
        )
        # init_process_group can return on one rank while a peer is still connecting
        # (PyTorch waits there only under TORCH_DIST_INIT_BARRIER=1): without this, an answer
        # with no collective lets ranks finish and leave before rank 0 has connected,
        # and rank 0 fails in init instead of in the exercise.
        _all_ranks_reach(rendezvous, "joined", rank, world_size)
        started = True
        outcome = ("result", getattr(load(runner_file), runner_name)(load(path)))
    except NotImplementedError as error:
        outcome = ("not attempted", _raised_in(error, Path(path)))
    except Exception as error:
        trace = "".join(traceback.format_exception(error)).rstrip()
        outcome = ("error", trace if started else f"{SETUP_FAILED}\n{trace}")
    finally:
        # The answer goes to disk before this rank leaves the group: when its peers fail
        # because it left, its answer already says whether it had finished.
        if outcome is not None:
            partial = Path(f"{answer}.partial")
            partial.write_bytes(pickle.dumps(outcome))
            os.replace(partial, answer)  # the parent never reads half an answer
        if dist.is_initialized():
            dist.destroy_process_group()


def _all_ranks_reach(store, stage: str, rank: int, world_size: int) -> None:
    """Mark this rank as at `stage` on the store and wait until every rank is (store
    keys, not a collective: the learner's collective calls stay the only ones)."""
    store.set(f"{stage}/{rank}", "yes")
    store.wait([f"{stage}/{other}" for other in range(world_size)])


def forkserver() -> multiprocessing.context.ForkServerContext:
    """The server every exercise's world (and conftest.spawn's) forks from, one per kernel
    or test worker: it imports torch and torch._dynamo (2 CPU-s at a first optimizer) once.
    A fork ends with `os._exit` after its exit handlers (why: `common.distributed.end_process`)."""
    server = multiprocessing.get_context("forkserver")
    # Not `__main__` (the default): a kernel's main module is Jupyter's, not the course's.
    server.set_forkserver_preload(["torch.distributed", "torch._dynamo", "course.exercises"])
    multiprocessing.forkserver.ensure_running()
    return server


def run_in_world(
    path: str | Path, runner: tuple[str, str], world_size: int = 2, timeout: float = 30
) -> list:
    """Run the learner's file at `path` in each process of a fresh gloo world of
    `world_size` processes on this machine, and return each rank's result, in rank order.

    `runner` is (file, function name) of the check's function that runs in each
    process: it gets the learner's module, calls the learner's function, and returns
    what the check needs (a picklable value).
    Raises NotAttempted if the learner's function still raises NotImplementedError,
    and AssertionError (with the worker's traceback) if it raised anything else, or
    did not return within `timeout` seconds. Every process has ended when this returns.
    """
    function = untouched(path)
    if function is not None:  # its world would only start to hear the TODO raise
        raise NotAttempted(function)
    server = forkserver()
    with tempfile.TemporaryDirectory(prefix="exercise-") as folder:
        store = Path(folder, "store")  # the rendezvous is a file: no port to pick
        answers = [Path(folder, f"rank{rank}.pickle") for rank in range(world_size)]
        logs = [Path(folder, f"rank{rank}.log") for rank in range(world_size)]
        workers = {}
        try:
            # The last rank starts first: pids then usually fall as ranks rise, so an
            # answer in the order of the pids (sorted, say) is not in rank order by luck.
            for rank in reversed(range(world_size)):
                arguments = (str(runner[0]), runner[1], str(path), rank, world_size, str(store))
                arguments += (timeout, str(answers[rank]), str(logs[rank]))
                # daemon: an interrupted check's processes end with the kernel (not waited for).
                workers[rank] = server.Process(target=_world_worker, args=arguments, daemon=True)
                workers[rank].start()
            in_rank_order = [workers[rank] for rank in range(world_size)]
            results = _collect(in_rank_order, answers, logs, timeout)
        finally:
            for worker in workers.values():
                if worker.exitcode is None:
                    worker.kill()
                worker.join()
    return results


def _collect(workers, answers, logs, timeout) -> list:
    """Wait for every worker's answer; stop at the first one that failed."""
    deadline = time.monotonic() + STARTUP_SECONDS + timeout
    results: dict[int, object] = {}
    while len(results) < len(workers):
        for rank, worker in enumerate(workers):
            if rank in results or worker.exitcode is None:
                continue
            if not answers[rank].exists():
                output = logs[rank].read_text(errors="replace").strip()[-3000:]
                raise AssertionError(
                    f"rank {rank} of the exercise's world exited with status "
                    f"{worker.exitcode} without an answer:\n{output}"
                )
            kind, value = pickle.loads(answers[rank].read_bytes())
            if kind == "not attempted":
                raise NotAttempted(value)
            if kind == "error":
                raise AssertionError(_failure(rank, value, answers))
            results[rank] = value
        if time.monotonic() > deadline:
            raise AssertionError(
                f"the exercise did not finish on every rank within {timeout:g} s "
                f"(ranks that finished: {sorted(results)}); does every rank make the "
                "same collective calls, in the same order?"
            )
        time.sleep(0.05)  # waiting for processes to end; nothing to be notified by
    return [results[rank] for rank in range(len(workers))]


# What gloo says on a rank whose peer's process closed its connections.
PEER_GONE = ("Connection closed by peer", "Connection reset by peer")
# The first line of an error raised while the world was being set up, before the answer ran.
SETUP_FAILED = "the gloo world failed to start, before your answer ran (run the check again):"


def _failure(rank: int, error: str, answers: list[Path]) -> str:
    """The message for rank `rank`'s `error` (a traceback). When it failed in a
    collective because a peer left, and that peer had returned from the exercise, the
    traceback alone points at the wrong rank: say what happened first."""
    returned = [
        other
        for other, answer in enumerate(answers)
        if other != rank and answer.exists() and pickle.loads(answer.read_bytes())[0] == "result"
    ]
    if error.startswith(SETUP_FAILED):
        return f"on rank {rank}, {error}"
    if returned and any(words in error for words in PEER_GONE):
        ranks = f"rank {returned[0]}" if len(returned) == 1 else f"ranks {returned}"
        return (
            f"rank {rank} waited in a collective that {ranks} never joined: {ranks} finished "
            "the exercise without it, and gloo saw the connection close; every rank must make "
            "the same collective calls: does a rank return early, or skip one that the "
            f"others make?\n{error}"
        )
    return f"the exercise failed on rank {rank}:\n{error}"
