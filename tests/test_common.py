"""The helpers every lesson script shares: device choice, the torchrun check,
rank-prefixed logging, one-line argument errors, the dataset, showing source, the
stop request that names the first signal heard, and which agent a stop signals."""

import os
import signal

import pytest
import torch
from conftest import REPO

from common import distributed, preemption, versions
from common.cli import LessonArgumentParser, positive_int
from common.data import SyntheticRegression
from common.models import regression_model
from common.preemption import STOP_SIGNALS, StopRequest
from common.source import definition_text, diff_text


def test_device_follows_hardware_and_override(monkeypatch):
    monkeypatch.delenv("DDP_DEVICE", raising=False)
    assert distributed.device_type() == ("cuda" if torch.cuda.is_available() else "cpu")
    monkeypatch.setenv("DDP_DEVICE", "cpu")
    assert distributed.device_type() == "cpu"
    assert distributed.device_for(local_rank=1) == torch.device("cpu")


def test_bad_device_override_is_one_clear_line(monkeypatch):
    monkeypatch.setenv("DDP_DEVICE", "tpu")
    with pytest.raises(SystemExit, match="use DDP_DEVICE=cpu or DDP_DEVICE=cuda"):
        distributed.device_type()


# Only a machine without a GPU can show that message; CI has none, so CI never skips it.
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a CPU-only machine")  # noqa: TID251
def test_asking_for_cuda_without_a_gpu_is_one_clear_line(monkeypatch):
    monkeypatch.setenv("DDP_DEVICE", "cuda")
    with pytest.raises(SystemExit, match="PyTorch sees no CUDA GPU"):
        distributed.device_type()


@pytest.mark.parametrize(
    "local_world_size, master_addr, interface_set",
    [
        ("4", "node1", True),  # one agent holds all 4 processes
        ("2", "127.0.0.1", True),  # two agents, but the store is on loopback
        ("2", "localhost", True),
        ("2", "node1", False),  # two agents on two machines: the address is lesson 04's
    ],
)
def test_torchrun_env_reads_torchruns_variables_and_gloo_uses_loopback_only_for_one_machine(
    local_world_size, master_addr, interface_set, monkeypatch
):
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "")  # so that monkeypatch restores it after
    monkeypatch.delenv("GLOO_SOCKET_IFNAME")
    values = {"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "MASTER_PORT": "1"}
    values |= {"MASTER_ADDR": master_addr, "LOCAL_WORLD_SIZE": local_world_size}
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    assert distributed.torchrun_env("torchrun ...") == (1, 3, 4)
    loopback = distributed.loopback_interface()
    assert loopback in ("lo", "lo0")
    assert os.environ.get("GLOO_SOCKET_IFNAME") == (loopback if interface_set else None)


def test_a_gloo_interface_you_chose_is_kept(monkeypatch):
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "eth7")
    distributed.gloo_over_loopback()
    assert os.environ["GLOO_SOCKET_IFNAME"] == "eth7"


class Writes(list):  # sys.stdout that keeps each write apart
    write, flush = list.append, lambda self: None


def test_log_is_one_write_per_line_prefixed_with_the_rank_and_log0_is_rank_0s(monkeypatch):
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setattr("sys.stdout", writes := Writes())
    distributed.log("epoch 1 | loss 0.5")
    distributed.log0("only rank 0 says this")
    assert writes == ["[rank2] epoch 1 | loss 0.5\n"]  # line and newline in one write
    monkeypatch.setenv("RANK", "0")
    distributed.log0("the loss, averaged over ranks")
    assert writes[1:] == ["[rank0] the loss, averaged over ranks\n"]


def test_dataset_is_the_same_everywhere_and_depends_on_the_seed():
    first, again = SyntheticRegression(64, seed=0), SyntheticRegression(64)
    other = SyntheticRegression(64, seed=1)
    torch.manual_seed(123)  # the global random state must not matter
    assert torch.equal(first.inputs, again.inputs) and torch.equal(first.targets, again.targets)
    assert not torch.equal(first.inputs, other.inputs)
    x, y = first[5]
    assert x.shape == (20,) and y.shape == (1,)


def test_model_start_is_seeded():
    a, b, c = regression_model(0), regression_model(0), regression_model(1)
    assert torch.equal(a.weight, b.weight) and not torch.equal(a.weight, c.weight)


def test_source_reads_definitions_and_diffs_whole_or_one_idea_at_a_time(tmp_path):
    old = tmp_path / "old.py"
    new = tmp_path / "new.py"
    old.write_text('"""Old: all about it."""\n\nimport os\n\n\ndef f():\n    return 1\n')
    new.write_text(
        '"""New."""\nimport os\n\n\nclass K:\n    @staticmethod\n    def f():\n        return 2\n'
    )
    assert definition_text(new, "K.f") == "    @staticmethod\n    def f():\n        return 2"
    diff = diff_text(old, new)
    assert "-    return 1" in diff and "+        return 2" in diff
    # The code's change, not the descriptions': the docstrings are left out, the code kept.
    assert "Old" not in diff and "New" not in diff and " import os\n" in diff
    with pytest.raises(LookupError, match="no function or class named 'g'"):
        definition_text(old, "g")
    assert "def main" in definition_text(REPO / "00_intro" / "hello_torchrun.py", "main")
    # One idea at a time: a definition left out, or the only one shown.
    old.write_text('"""Old."""\n\n\ndef setup():\n    return 1\n\n\nclass T:\n    x = 1\n')
    new.write_text('"""New."""\n\n\ndef setup():\n    return 2\n\n\nclass T:\n    x = 3\n')
    first = diff_text(old, new, leave_out=("T",))
    second = diff_text(old, new, only=("T",))
    assert "+    return 2" in first and "x = " not in first
    assert "+    x = 3" in second and "return" not in second
    whole = diff_text(old, new)
    assert "+    return 2" in whole and "+    x = 3" in whole


def test_positive_int_refuses_zero_negatives_and_words_in_one_line(capsys):
    parser = LessonArgumentParser(prog="train.py", launch_hint="python train.py 20 5")
    parser.add_argument("total_epochs", type=positive_int)
    assert parser.parse_args(["20"]).total_epochs == 20
    for bad in ("0", "-3", "two"):
        with pytest.raises(SystemExit):
            parser.parse_args([bad])
        err = capsys.readouterr().err
        assert err == (
            f"train.py: argument total_epochs: {bad!r} is not a positive integer; "
            "launch it as: python train.py 20 5\n"
        )


def test_an_older_pytorch_is_told_in_one_line_what_it_lacks(monkeypatch):
    monkeypatch.setattr(torch, "__version__", "2.11.0+cu130")
    with pytest.raises(SystemExit) as stopped:
        versions.needs_torch("2.13", "sync_buffers.py (DDP's forward_sync_buffers)")
    assert str(stopped.value) == (
        "sync_buffers.py (DDP's forward_sync_buffers) needs PyTorch 2.13 or newer; this is "
        "2.11.0+cu130: pip install 'torch>=2.13' (requirements.txt)"
    )
    for enough in ("2.13.0", "2.14.1+cpu", "3.0.0"):
        monkeypatch.setattr(torch, "__version__", enough)
        versions.needs_torch("2.13", "anything")  # returns: new enough
    assert versions.release("2.9.1") < versions.release("2.13") < versions.release("2.14.0a0")


def test_a_figure_is_described_by_its_titles():
    import matplotlib.pyplot as plt

    from common.figure_text import alt_text

    fig, (left, right) = plt.subplots(1, 2)
    left.set_title("loss")
    right.set_title("tokens/s")
    assert alt_text(fig) == "loss; tokens/s"
    fig.suptitle("GPT on 2 processes")
    assert alt_text(fig) == "GPT on 2 processes"  # the figure's own title says it all
    plt.close(fig)


@pytest.mark.parametrize("shared", ["True", "False"])
def test_only_torchruns_shared_store_gets_a_prefix_per_attempt(monkeypatch, shared):
    """The shared store keeps dead attempts' keys: each attempt meets under its own prefix.
    A store of the attempt's own needs none (a prefix would split agents on several nodes)."""
    store = distributed.dist.HashStore()
    monkeypatch.setattr(distributed.dist, "rendezvous", lambda url: iter([(store, 0, 1)]))
    monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", shared)
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "2")
    monkeypatch.setenv("GROUP_WORLD_SIZE", "2")
    monkeypatch.setenv("TORCHELASTIC_MAX_RESTARTS", "0" if shared == "True" else "3")
    distributed.store_of_this_attempt("torchrun x.py").set("key", "value")
    assert store.check(["attempt2/key" if shared == "True" else "key"])


def test_a_stop_request_names_the_first_signal_it_heard():
    """Slurm may send SIGUSR1 early (--signal), then SIGTERM: the stop answered the first."""
    before = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    try:
        request = StopRequest()
        assert not request.received
        signal.raise_signal(signal.SIGUSR1)
        signal.raise_signal(signal.SIGTERM)
        assert request.received and request.signal_name == "SIGUSR1"
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)


AGENT = ["/venv/bin/python", "-m", "torch.distributed.run", "--max-restarts=3", "train.py"]


@pytest.mark.parametrize(
    "local_rank, restarts, parent, signalled",
    [
        ("0", "3", AGENT, True),
        ("1", "3", AGENT, False),  # one SIGTERM per agent: a second cuts its wait short
        ("0", "0", AGENT, False),  # no restart to spend: the agent stops anyway
        ("0", "3", ["/usr/bin/python", "-m", "ipykernel_launcher"], False),  # not an agent
    ],
)
def test_only_local_rank_0_of_a_restarting_agent_signals_it(
    monkeypatch, local_rank, restarts, parent, signalled
):
    sent = []

    class Parent:  # the worker's parent process, as psutil shows it
        def __init__(self, pid):
            assert pid == os.getppid()

        def cmdline(self):
            return parent

        def send_signal(self, signum):
            sent.append(signum)

    monkeypatch.setattr(preemption.psutil, "Process", Parent)
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "none")
    monkeypatch.setenv("LOCAL_RANK", local_rank)
    monkeypatch.setenv("TORCHELASTIC_MAX_RESTARTS", restarts)
    preemption.stop_the_agent()
    assert sent == ([signal.SIGTERM] if signalled else [])
