"""The setup check: all OK on a machine that can run the course, and a FAIL line with
its fix, and exit status 1, when something is missing."""

import socket
import subprocess

import torch
from conftest import PYTHON

from course import setup_check


def test_this_machine_passes():
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


def test_any_failure_makes_the_exit_status_1(monkeypatch, capsys):
    results = [
        setup_check.Result("OK", "Python", "3.11"),
        setup_check.Result("FAIL", "gloo backend", "no gloo; reinstall"),
    ]
    monkeypatch.setattr(setup_check, "all_checks", lambda: results)
    assert setup_check.main() == 1
    out = capsys.readouterr().out
    assert "  FAIL  gloo backend           no gloo; reinstall" in out
    assert "1 check(s) failed" in out
