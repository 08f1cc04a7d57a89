"""System packages are installed by a command of their own, never as a side effect, and
a part that cannot run is a visible skip, or a failure where CI demands it."""

import os
import subprocess

import conftest
import pytest
from conftest import PYTHON, REPO

from course import system_packages
from course.cluster import netns, slurm


def test_a_part_that_cannot_run_says_why_and_nothing_is_installed(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(system_packages, "program", lambda name: None)
    monkeypatch.setattr(system_packages, "apt_install", lambda *a: pytest.fail("installed"))
    failure = system_packages.install(["chromium"], timeout=5)
    assert failure == "installing chromium needs root: run `sudo python3 -m course.system_packages`"
    assert slurm.why_unavailable().startswith("a local Slurm cluster needs root")
    assert netns.why_unavailable() == (
        "making network namespaces needs root (`ip netns add`); run as root to see it"
    )
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(system_packages, "program", lambda name: None if name == "slurmd" else "/x")
    assert slurm.why_unavailable() == (
        "Slurm is not installed (slurmd not found); install it with "
        "`sudo python3 -m course.system_packages slurm`"
    )


def test_nothing_missing_means_nothing_to_do(monkeypatch):
    monkeypatch.setattr(system_packages, "program", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(system_packages, "apt_install", lambda *a: pytest.fail("installed"))
    assert system_packages.install(list(system_packages.PARTS), timeout=5) is None


def test_the_command_runs_without_the_virtual_environment():
    # `.ci/run` calls it with the system's python3 before .venv exists: stdlib only.
    check = subprocess.run(
        ["python3", "-S", "-m", "course.system_packages", "--check", "chromium"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert check.stdout.startswith("chromium: ") and check.returncode in (0, 1), check.stderr
    unknown = subprocess.run(
        [PYTHON, "-m", "course.system_packages", "slurmm"], cwd=REPO, capture_output=True, text=True
    )
    assert unknown.returncode == 2
    assert "no part named slurmm; the parts are: slurm, chromium, netns, git" in unknown.stderr


def test_it_installs_the_programs_the_network_namespaces_need():
    # The strict run's two-hosts part checks for these programs (netns.why_unavailable).
    packages, programs = system_packages.PARTS["netns"]
    assert programs == list(netns.TOOLS) and packages == list(netns.TOOLS.values())


def test_a_part_that_cannot_run_skips_or_under_strict_fails(monkeypatch):
    monkeypatch.setattr(conftest, "STRICT", False)
    # Catches skip_or_fail's skip, does not skip.
    with pytest.raises(pytest.skip.Exception, match="no chromium"):  # noqa: TID251
        conftest.skip_or_fail("no chromium")
    monkeypatch.setattr(conftest, "STRICT", True)
    with pytest.raises(pytest.fail.Exception, match="COURSE_STRICT=1, and this part cannot run"):
        conftest.skip_or_fail("no chromium")
    conftest.skip_or_fail(None)  # a part that can run neither skips nor fails
