"""Lesson 04: multinode.py on one node, whose processes all see one folder: global
rank 0 alone saves. (Two nodes with node-by-node ranks, copies on nodes that share no
filesystem, and the stop when nodes resumed from different epochs are run and checked
by the lesson 04 notebook's own check cell.)"""

from conftest import REPO

from common.launch import run

MULTINODE = REPO / "04_multinode" / "multinode.py"


def test_one_shared_folder_has_one_writer(tmp_path):
    # One node: every process sees the same folder, so global rank 0 alone saves.
    output = run(
        f"torchrun --standalone --nproc_per_node=2 {MULTINODE} 2 1", cwd=tmp_path, quiet=True
    )
    assert "is shared by all nodes: global rank 0 saves" in output
    saves = [line for line in output.splitlines() if "snapshot saved" in line]
    assert len(saves) == 2 and all(line.startswith("[rank0]") for line in saves), saves
    assert [path.name for path in tmp_path.iterdir()] == ["snapshot.pt"]  # no probe left
