"""Every notebook decides its device once, before its first launch, for every launch it
makes: on faked machines of 0 to 8 GPUs, all of a notebook's launches get one device."""

import nbformat
import pytest
from conftest import fake_cuda_gpus

from common import notebook_device
from common.command_line import PROCESS_COUNT
from common.launch import run
from course.lessons import declaration, lesson_notebooks


@pytest.mark.parametrize("notebook", lesson_notebooks([]), ids=lambda nb: nb.stem)
def test_a_notebook_declares_at_least_every_process_count_it_writes(notebook):
    declared = declaration(notebook)
    text = "\n".join(c.source for c in nbformat.read(notebook, as_version=4).cells)
    written = [int(count) for count in PROCESS_COUNT.findall(text)]
    assert written, "no launch found"
    if "cpu_because" not in declared:
        assert max(written) <= declared["processes_per_machine"], written


@pytest.mark.parametrize("count", [0, 1, 2, 3, 4, 8])
@pytest.mark.parametrize("path", lesson_notebooks([]), ids=lambda nb: nb.stem)
def test_every_launch_of_a_notebook_gets_one_device(path, count, monkeypatch, notebook, capsys):
    fake_cuda_gpus(monkeypatch, count)
    declared = declaration(path)
    device = notebook.choose(**declared)
    needed = declared.get("processes_per_machine", 0)
    wanted = "cuda" if count and "cpu_because" not in declared and count >= needed else "cpu"
    assert device == wanted
    assert capsys.readouterr().out.count("\n") == 1  # said once, in one line


SHOW_DEVICE = "python -c \"import os; print('DDP_DEVICE', os.environ.get('DDP_DEVICE', 'unset'))\""


@pytest.fixture
def notebook(monkeypatch):
    """A notebook's kernel: its environment and its declaration are undone afterwards."""
    monkeypatch.setattr(notebook_device, "declared", None)
    monkeypatch.setattr(notebook_device, "_chosen", None)
    monkeypatch.setenv("DDP_DEVICE", "")  # set, then removed: undone at the end
    monkeypatch.delenv("DDP_DEVICE")
    return notebook_device


@pytest.mark.parametrize("count", [0, 1, 2, 3, 4, 8])
def test_every_launch_of_a_notebook_runs_where_the_notebook_decided(monkeypatch, notebook, count):
    """Up to 4 processes per machine: every launch on 4 or more GPUs, else every launch
    (one-process ones too) on the CPU, so that its results compare."""
    fake_cuda_gpus(monkeypatch, count)
    device = notebook.choose(processes_per_machine=4)
    assert device == ("cuda" if count >= 4 else "cpu")
    seen = {
        run(f"{SHOW_DEVICE} {asks}", quiet=True)
        for asks in ("--nproc_per_node=1", "--nproc_per_node=2", "--world_size 4", "")
    }
    assert seen == {f"DDP_DEVICE {device}\n"}


def test_the_notebook_says_once_where_it_runs(monkeypatch, notebook, capsys):
    fake_cuda_gpus(monkeypatch, 2)
    notebook.choose(processes_per_machine=4)
    assert capsys.readouterr().out == (
        "Every launch of this notebook runs on the CPU (gloo): 2 GPU(s) here, and it starts "
        "up to 4 processes per machine, each needing a GPU of its own. A machine with 4 GPUs "
        "runs it on GPUs; or launch its scripts yourself with at most --nproc_per_node=2\n"
    )
    notebook.choose(cpu_because="two agents on one machine play two nodes")
    assert capsys.readouterr().out == (
        "Every launch of this notebook runs on the CPU (gloo): two agents on one machine "
        "play two nodes\n"
    )
    assert run(SHOW_DEVICE, quiet=True) == "DDP_DEVICE cpu\n"


def test_a_device_set_before_the_notebook_wins(notebook, capsys, monkeypatch):
    fake_cuda_gpus(monkeypatch, 8)
    monkeypatch.setenv("DDP_DEVICE", "cpu")
    assert notebook.choose(processes_per_machine=2) == "cpu"
    assert capsys.readouterr().out == "DDP_DEVICE=cpu was set: every launch runs there\n"


def test_a_launch_bigger_than_the_notebook_declared_is_refused(monkeypatch, notebook):
    fake_cuda_gpus(monkeypatch, 0)
    notebook.choose(processes_per_machine=2)
    with pytest.raises(ValueError, match=r"starts 3 processes per machine, but this notebook "):
        run(f"{SHOW_DEVICE} --nproc_per_node=3", quiet=True)
    assert run(f"{SHOW_DEVICE} --nproc_per_node=2", quiet=True) == "DDP_DEVICE cpu\n"
