"""One-machine launches do not depend on the machine's name: under a hostname that
resolves nowhere, torchrun meets (`common.launch` gives it 127.0.0.1) and gloo never looks
the name up (`gloo_over_loopback`). And `run` gives torchrun OMP_NUM_THREADS=1 (00_intro)."""

import shutil
import subprocess

from conftest import PYTHON, REPO, skip_or_fail

from common.ports import free_port

NAME = "no-such-host.invalid"  # .invalid never resolves (RFC 6761)

# Inside the namespace: prove the premise, then start the commands side by side, labelled.
LAUNCH = """
import contextlib, os, socket, sys
from common.launch import start
os.environ.pop("OMP_NUM_THREADS", None)  # as in a learner's kernel (conftest sets it)
with contextlib.suppress(OSError):
    socket.getaddrinfo(socket.getfqdn(), None)
    sys.exit(f"{socket.getfqdn()} resolves: this test would prove nothing")
commands = [start(c, cwd=sys.argv[1], label=str(i)) for i, c in enumerate(sys.argv[2:])]
for command in commands:
    command.wait(120)
"""


def why_no_uts_namespace() -> str | None:
    if shutil.which("unshare") is None:
        return "needs unshare (util-linux) to give a process a hostname of its own"
    probe = subprocess.run(["unshare", "--uts", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"cannot make a UTS namespace ({probe.stderr.strip()}): run the tests as root"
    return None


HELLO = "{REPO}/00_intro/hello_torchrun.py"
TWO_AGENTS = "torchrun --nnodes=2 --nproc_per_node=1 --rdzv_backend=c10d --rdzv_id=t "
HELLO_SAID = "all_reduce(SUM) of the ranks = 1 (expected 1)"
# Each command, a line it prints, and how often.
LAUNCHES = [
    ("torchrun --standalone --nproc_per_node=2 " + HELLO, HELLO_SAID, 2),
    # Two agents on this machine playing two nodes, as lesson 04 starts them.
    (TWO_AGENTS + "--rdzv_endpoint=127.0.0.1:{port} " + HELLO, HELLO_SAID, 1),
    (TWO_AGENTS + "--rdzv_endpoint=127.0.0.1:{port} " + HELLO, HELLO_SAID, 1),
    # mp.spawn: the processes meet at 127.0.0.1 (init_method) and use gloo.
    ("python {REPO}/02_multigpu/multigpu.py 1 1 --world_size 2", "epoch 0 | checkpoint saved", 1),
]


def test_a_one_machine_launch_meets_when_the_hostname_does_not_resolve(tmp_path):
    skip_or_fail(why_no_uts_namespace())
    port = free_port()
    commands = [command.format(REPO=REPO, port=port) for command, _, _ in LAUNCHES]
    inside = f'hostname {NAME} && exec "$0" -c "$@"'
    result = subprocess.run(
        ["unshare", "--uts", "sh", "-c", inside, PYTHON, LAUNCH, str(tmp_path), *commands],
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    for number, (_, expected, times) in enumerate(LAUNCHES):
        said = [line for line in output.splitlines() if line.startswith(f"[{number}] ")]
        assert sum(expected in line for line in said) == times, (number, output[-3000:])
    assert "Unable to resolve hostname" not in output
    assert NAME not in output  # nothing tried to reach the name
    assert "Setting OMP_NUM_THREADS environment variable" not in output
