"""GPU mode: what the lessons claim, asserted with the lesson scripts on CUDA GPUs with
nccl, one process per GPU (up to 4). It runs where PyTorch sees CUDA GPUs or where
COURSE_TEST_DEVICE says (`python -m course.gpu_mode`; `--device cpu`: gloo, 2 processes);
a test needing more GPUs than here skips, saying how many. The plain CPU suite skips the
module, each claim being proven there on gloo with 2 to 4 processes:
- all_reduce sums the ranks: 00_intro's check cell;
- the ring equals all_reduce: 01_theory's check cell, test_common_ring.py, test_01_theory.py;
- each process's tensors on its own device: test_common_distributed_gpus.py (faked GPUs);
- DDP's replicas end equal: 01_theory's check cell and test_01_theory.py;
- mp.spawn trains and saves model.module: 02_multigpu's check cell;
- hooks and static_graph: 02 part 3's check cell; SyncBatchNorm: 02 part 2's;
- a stop agreed by all resumes exactly: 03 part 3's check cell; crash and restart: 03's;
- each rank's own generators back: test_common_random_state.py (its `check_world` runs here);
- the GPT learns: 05_mingpt's check cells and test_05_training.py.
The launches set CUBLAS_WORKSPACE_CONFIG=:4096:8: GPU runs repeat bit for bit only with
deterministic cuBLAS (PyTorch's "Reproducibility" notes)."""

import math
import os
import re
import signal

import pytest
import torch
import torch.multiprocessing as mp
from conftest import REPO, assert_same_tensors, lesson_05_text
from test_common_random_state import check_world

from common.launch import run, start
from common.ports import free_port


def suite_device() -> tuple[str, int]:
    """(device, processes): CUDA with one process per GPU (at most 4), or the CPU with 2."""
    forced = os.environ.get("COURSE_TEST_DEVICE", "")
    if forced not in ("", "cpu", "cuda"):
        pytest.fail(f"COURSE_TEST_DEVICE={forced!r}: use cpu or cuda")
    device = forced or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cpu":
        return "cpu", 2
    if not torch.cuda.is_available():
        pytest.fail("COURSE_TEST_DEVICE=cuda but PyTorch sees no CUDA GPU")
    return "cuda", min(torch.cuda.device_count(), 4)


if not os.environ.get("COURSE_TEST_DEVICE") and not torch.cuda.is_available():
    # Not a skip to fail under COURSE_STRICT=1: the docstring says where the CPU proves each.
    pytest.skip(  # noqa: TID251
        "the GPU mode's test: runs on CUDA GPUs (or with COURSE_TEST_DEVICE); "
        "on the CPU its claims are the notebooks' and tests' (its docstring lists where)",
        allow_module_level=True,
    )

DEVICE, PROCESSES = suite_device()
BACKEND = {"cpu": "gloo", "cuda": "nccl"}[DEVICE]
ENVIRONMENT = {"DDP_DEVICE": DEVICE, "CUBLAS_WORKSPACE_CONFIG": ":4096:8"}


def needs_processes(fewest: int) -> None:
    """Skip, saying so, a test needing more GPUs than here (the GPU mode lists it)."""
    if PROCESSES < fewest and DEVICE == "cuda":
        pytest.skip(f"needs {fewest} GPUs")  # noqa: TID251
    assert PROCESSES >= fewest, f"needs {fewest} processes; on the CPU this module runs {PROCESSES}"


def launch(command: str, folder, timeout: int = 240) -> str:
    return run(command, cwd=folder, timeout=timeout, quiet=True, env=ENVIRONMENT)


def torchrun(script: str, arguments: str, folder, timeout: int = 240) -> str:
    command = f"torchrun --standalone --nproc_per_node={PROCESSES} {REPO / script} {arguments}"
    return launch(command, folder, timeout)


def test_each_process_joins_on_its_own_device_and_sums(tmp_path):
    output = torchrun("00_intro/hello_torchrun.py", "", tmp_path)
    expected = sum(range(PROCESSES))
    for rank in range(PROCESSES):
        device = f"cuda:{rank}" if DEVICE == "cuda" else "cpu"  # one machine: local = global
        joined = f"local_rank={rank} world_size={PROCESSES} backend={BACKEND} device={device}"
        summed = f"[rank{rank}] all_reduce(SUM) of the ranks = {expected} (expected {expected})"
        assert joined in output and summed in output, output


def test_the_ring_equals_all_reduce_on_the_device(tmp_path):
    output = torchrun("01_theory/ring_allreduce.py", "--max-size 16KB --repeats 1", tmp_path, 300)
    said = f"the ring equals dist.all_reduce on {PROCESSES} ranks: every size, every dtype"
    assert said in output, output


def test_the_trainer_s_tensors_live_on_each_process_s_own_device(tmp_path):
    output = torchrun("tests/scripts/where_tensors_live.py", "", tmp_path)
    for rank in range(PROCESSES):  # one machine: local rank = rank
        wanted = f"cuda:{rank}" if DEVICE == "cuda" else "cpu"
        where = f"['{wanted}']"
        assert (
            f"[rank{rank}] every tensor on {wanted}: parameters on {where}, gradients on "
            f"{where}, momentum on {where}, batch on {where}"
        ) in output, output


def test_ddp_makes_the_replicas_equal_on_the_device(tmp_path):
    output = torchrun("01_theory/ddp_replicas.py", "--epochs 1", tmp_path)
    before = re.findall(r"before DDP\(model\): (.*)", output)
    after = re.findall(r"after  DDP\(model\): (.*)", output)
    assert len(before) == len(after) == PROCESSES
    assert len(set(after)) == 1, "the replicas end equal"


def test_the_spawned_script_trains_one_process_per_device(tmp_path):
    output = launch(
        f"python {REPO / '02_multigpu/multigpu.py'} 2 1 --world_size {PROCESSES}", tmp_path
    )
    losses = [float(loss) for loss in re.findall(r"\| loss ([\d.]+)", output)]
    assert len(losses) == 2 and losses[1] < losses[0], output
    weights = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    assert all(name.split(".")[0] != "module" for name in weights)  # model.module saved


def test_communication_hooks_hold_on_the_device(tmp_path):
    hooks = torchrun("02_multigpu/ddp_options/comm_hooks.py", "--size-mb 16 --steps 12", tmp_path)
    sent = dict(re.findall(r"traffic \| (\w+) +\| MB to all_reduce per step +([\d.]+)", hooks))
    assert float(sent["fp16"]) == float(sent["bf16"]) == float(sent["plain"]) / 2 == 8, sent
    assert float(sent["powersgd1"]) < float(sent["plain"]) / 50, sent
    by_hand = re.search(r"by_hand +\| max \|w - w plain\| (\S+)", hooks)
    assert by_hand and float(by_hand[1]) < 1e-6, hooks  # DDP's average, written out


def test_sync_batchnorm_equals_one_process_on_the_device(tmp_path):
    """PyTorch's SyncBatchNorm equals one process on the global batch, on the same GPU
    (on the CPU PyTorch refuses it); the hand-written version does too, on any device."""
    needs_processes(2)  # with one process there is nothing to synchronize
    output = torchrun("02_multigpu/sync_batchnorm.py", "", tmp_path)
    gaps = dict(re.findall(r"\[rank0\] mode (\w+) +\|.*one process\| (\S+)", output))
    if DEVICE == "cuda":
        assert float(gaps["torch"]) < 1e-5, output
    else:
        assert "torch" not in gaps, output
        refused = "nn.SyncBatchNorm is refused on cpu: SyncBatchNorm layers only work with GPU"
        assert refused in output, output
    assert float(gaps["synced"]) < 1e-5 < 1e-2 < float(gaps["local"]), output


def test_static_graph_stops_the_silent_drift_on_the_device(tmp_path):
    needs_processes(2)  # the drift is between ranks
    static = torchrun("02_multigpu/ddp_options/static_graph.py", "", tmp_path)
    spread = dict(re.findall(r"\(layer used 2x, (.*?)\): .* max \|rank - rank 0\| (\S+)", static))
    assert float(spread["use_reentrant=True, no option"]) > 1e-3, static  # the silent drift
    assert float(spread["use_reentrant=True, static_graph=True"]) == 0, static


def test_a_stop_heard_by_one_rank_resumes_with_the_weights_of_a_run_without_one(tmp_path):
    """Lesson 03, part 3, on the device: the agreement's all-reduce (MAX), the gathered
    random states and the barrier of the stop all run on it (nccl on GPUs)."""
    script = REPO / "03_fault_tolerance/multigpu_preemptible.py"
    job = f"torchrun --standalone --nproc_per_node={PROCESSES} {script} 4 2 --batch_size 8"
    launch(f"{job} --snapshot_path clean.pt", tmp_path)
    stopped = start(f"{job} --snapshot_path stopped.pt", cwd=tmp_path, quiet=True, env=ENVIRONMENT)
    last = PROCESSES - 1
    pid = int(re.search(r"pid=(\d+)", stopped.wait_for(rf"pid=\d+ rank={last} ", 120))[1])
    stopped.wait_for(r"^\[rank0\] epoch 0 \|", timeout=120)
    os.kill(pid, signal.SIGUSR1)  # one worker only: the others learn it from the all-reduce
    output = stopped.wait(240, expect_failure=True)
    where = set(re.findall(r"epoch (\d+) \| stop agreed before step (\d+)", output))
    assert len(where) == 1 and output.count("stop agreed") == PROCESSES, output
    resumed = launch(f"{job} --snapshot_path stopped.pt", tmp_path)
    assert "continuing at epoch {} step {}".format(*where.pop()) in resumed
    clean, restarted = (
        torch.load(tmp_path / name, weights_only=True) for name in ("clean.pt", "stopped.pt")
    )
    assert_same_tensors(clean["model"], restarted["model"])


def test_a_crash_and_restart_end_with_the_weights_of_a_run_without_one(tmp_path):
    script = "03_fault_tolerance/multigpu_torchrun.py"
    torchrun(script, "8 2 --snapshot_path clean.pt", tmp_path)
    command = f"torchrun --standalone --nproc_per_node={PROCESSES} --max-restarts=1 {REPO / script}"
    job = start(
        f"{command} 8 2 --snapshot_path restarted.pt", cwd=tmp_path, quiet=True, env=ENVIRONMENT
    )
    job.wait_for(r"^\[rank0\] epoch 2 \|", timeout=120)
    job.kill_worker(PROCESSES - 1)  # from outside, wherever it is by then: epoch 3 or later
    output = job.wait(240)
    assert "restart=1" in output
    clean, restarted = (
        torch.load(tmp_path / name, weights_only=True) for name in ("clean.pt", "restarted.pt")
    )
    assert clean["epochs_run"] == restarted["epochs_run"] == 8
    assert_same_tensors(clean["model"], restarted["model"])
    for mine, expected in zip(restarted["rng_state"], clean["rng_state"], strict=True):
        assert mine.keys() == expected.keys() == ({"cpu", "cuda"} if DEVICE == "cuda" else {"cpu"})
        assert all(torch.equal(mine[key], expected[key]) for key in mine)


def test_every_rank_gets_its_own_generators_back_on_the_device(monkeypatch):
    """Dropout draws from each GPU's CUDA generator (the crash test above compares saved
    states only, which a broken restore of a generator nothing draws from would pass)."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    mp.spawn(check_world, args=(PROCESSES, free_port(), DEVICE), nprocs=PROCESSES, join=True)


def test_the_gpt_learns_on_the_device(tmp_path):
    text = lesson_05_text(tmp_path)  # 21 steps per epoch
    settings = (  # a global batch of 32: 1, 2 or 4 processes x micro-batches of 8
        "model.n_layer=2 model.n_head=2 model.n_embd=32 data.block_size=32 "
        "trainer.global_batch_size=32 trainer.batch_size=8 trainer.max_epochs=2 "
        "optimizer.warmup_steps=5 trainer.sample_chars=20"
    )
    output = torchrun("05_mingpt/main.py", f"--data {text} {settings}", tmp_path, timeout=300)
    vocabulary = int(re.search(r"(\d+) distinct characters", output).group(1))
    found = re.findall(r"end of epoch \d/2: .* validation loss ([\d.]+)", output)
    losses = [float(loss) for loss in found]
    assert len(losses) == 2, output
    # Guessing every character alike scores ln(vocabulary); learning does better, and
    # the second epoch better than the first.
    assert losses[1] < losses[0] < math.log(vocabulary)
