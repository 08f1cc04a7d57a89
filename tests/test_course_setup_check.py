"""The setup check: all OK on a machine that can run the course, and a FAIL line with
its fix, and exit status 1, when something is missing."""

import platform
import shutil
import socket
import subprocess
from types import SimpleNamespace

import torch
from conftest import PYTHON, fake_cuda_gpus

import common.launch
from common.launch import CommandFailed
from course import setup_check


def test_this_machine_passes():
    # Every check here, this environment's kernel and this torch's libuv among them: each
    # says OK or FAIL.
    result = subprocess.run(
        [PYTHON, "-m", "course.setup_check"], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "FAIL" not in result.stdout
    assert "OK    torchrun, 2 processes  a gloo world of 2 started and ran in" in result.stdout
    assert result.stdout.rstrip().endswith("open 00_intro/00_intro.ipynb")


def test_an_old_torch_fails_with_the_fix(monkeypatch):
    monkeypatch.setattr(torch, "__version__", "2.1.0+cpu")
    result = setup_check.check_torch()
    assert result.status == "FAIL"
    assert result.detail == "2.1.0+cpu is too old; run: .venv/bin/pip install -r requirements.txt"


def test_no_loopback_port_fails_with_the_fix(monkeypatch):
    def refuse(self, address):
        raise OSError(99, "Cannot assign requested address")

    monkeypatch.setattr(socket.socket, "bind", refuse)
    result = setup_check.check_loopback_port()
    assert result.status == "FAIL"
    assert "Cannot assign requested address" in result.detail
    assert "check that the loopback interface is up" in result.detail


def test_a_kernel_of_another_python_fails_with_the_fix(monkeypatch, tmp_path):
    from jupyter_client.kernelspec import KernelSpec, KernelSpecManager

    other = "/opt/other/bin/python3"
    spec = KernelSpec(argv=[other, "-m", "ipykernel_launcher"], resource_dir=str(tmp_path))
    monkeypatch.setattr(KernelSpecManager, "get_kernel_spec", lambda self, name: spec)
    result = setup_check.check_jupyter_kernel()
    assert result.status == "FAIL"
    assert result.detail.startswith(f"'python3' (in {tmp_path}) runs {other}, not this environment")
    assert "jupyter kernelspec remove python3" in result.detail


def test_a_hostname_that_resolves_is_ok_else_the_fix_is_named(monkeypatch):
    monkeypatch.delenv("PET_LOCAL_ADDR", raising=False)
    monkeypatch.setattr(socket, "getfqdn", lambda: "localhost")
    assert setup_check.check_hostname().status == "OK"

    def unknown(*args, **kwargs):
        raise socket.gaierror(8, "nodename nor servname provided, or not known")

    monkeypatch.setattr(socket, "getfqdn", lambda: "laptop.local")
    monkeypatch.setattr(socket, "getaddrinfo", unknown)
    result = setup_check.check_hostname()
    assert (result.status, result.detail) == (
        "NOTE",
        "'laptop.local' does not resolve (nodename nor servname provided, or not known): the "
        "notebooks do not need it, but torchrun --standalone in a terminal would hang; add "
        "--local-addr=127.0.0.1 to those commands, or map the name to 127.0.0.1 in /etc/hosts",
    )


def test_native_windows_fails_and_names_wsl2(monkeypatch):
    monkeypatch.setattr(platform, "system", lambda: "Windows")
    result = setup_check.check_platform()
    assert result.status == "FAIL" and "use WSL2" in result.detail


def test_a_torch_without_libuv_fails_with_the_line_torch_gives(monkeypatch):
    said = (  # what torch says on a build without libuv
        "use_libuv was requested but PyTorch was built without libuv support, "
        "run with USE_LIBUV=0 to disable it."
    )

    def without_libuv(*args, **kwargs):
        raise RuntimeError(said)

    monkeypatch.setattr(torch.distributed, "TCPStore", without_libuv)
    result = setup_check.check_libuv()
    assert result.status == "FAIL" and result.detail.startswith(said + "; torchrun cannot start")


def test_no_gpu_driver_says_nothing_and_a_gpu_torch_cannot_see_is_named(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert setup_check.check_gpu_driver() is None  # no driver: nothing more to say
    listed = subprocess.CompletedProcess([], 0, stdout="GPU 0: NVIDIA A100 (UUID: GPU-1)\n")
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(subprocess, "run", lambda *args, **kwargs: listed)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    result = setup_check.check_gpu_driver()
    assert result.status == "NOTE"
    assert f"nvidia-smi lists a GPU but this torch ({torch.__version__}, CUDA " in result.detail


def test_a_machine_on_a_network_is_told_what_a_job_exposes(monkeypatch):
    import psutil

    def interfaces(found):
        # psutil's own tuple type moved between releases; the check reads these two fields.
        listing = {
            name: [SimpleNamespace(family=family, address=address) for family, address in pairs]
            for name, pairs in found.items()
        }
        monkeypatch.setattr(psutil, "net_if_addrs", lambda: listing)

    loopback = [(socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")]
    interfaces({"lo": loopback})
    assert setup_check.check_network().status == "OK"  # loopback only: nothing exposed
    wlan0 = [
        (socket.AF_PACKET, "aa:bb:cc:dd:ee:ff"),
        (socket.AF_INET, "192.168.1.23"),
        (socket.AF_INET6, "fe80::1%wlan0"),  # link-local: this link only
    ]
    interfaces({"lo": loopback, "wlan0": wlan0})
    result = setup_check.check_network()
    assert result.status == "NOTE"
    assert result.detail.startswith(
        "a running job's stores are reachable at 192.168.1.23 (wlan0): run the course on a "
        "network you trust"
    )


def test_on_one_gpu_the_torchrun_check_runs_its_two_processes_on_the_cpu(monkeypatch):
    # Two processes need two GPUs (lesson 00): on a machine of one, the check launches
    # on the CPU, as the notebooks would. (The launch itself: test_this_machine_passes.)
    devices = []

    def refused(command, env, **kwargs):
        devices.append(env["DDP_DEVICE"])
        raise CommandFailed("exited with status 1", "RuntimeError: no CUDA GPUs")

    monkeypatch.setattr(common.launch, "run", refused)
    for gpus in (1, 2):
        fake_cuda_gpus(monkeypatch, gpus)
        result = setup_check.check_torchrun()
        assert result.status == "FAIL" and result.item == "torchrun, 2 processes", result
    assert devices == ["cpu", "cuda"]


def test_any_failure_makes_the_exit_status_1_else_the_ready_line_says_how_to_start(
    monkeypatch, capsys
):
    results = [
        setup_check.Result("OK", "Python", "3.11"),
        setup_check.Result("FAIL", "gloo backend", "no gloo; reinstall"),
    ]
    monkeypatch.setattr(setup_check, "all_checks", lambda: results)
    assert setup_check.main() == 1
    out = capsys.readouterr().out
    assert "  FAIL  gloo backend           no gloo; reinstall" in out
    assert "1 check(s) failed" in out
    # Jupyter refuses to start as root without --allow-root (a container, say).
    monkeypatch.setattr(setup_check, "all_checks", lambda: results[:1])
    for uid, command in ((0, "jupyter lab --allow-root and"), (1000, "jupyter lab and")):
        monkeypatch.setattr(setup_check.os, "geteuid", lambda uid=uid: uid)
        assert setup_check.main() == 0
        assert f"Ready: start with .venv/bin/{command} open" in capsys.readouterr().out
