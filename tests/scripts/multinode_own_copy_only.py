"""`04_multinode/multinode.py` without the agreement on one snapshot: each rank resumes
from its own copy, if any, as in lesson 03. Takes multinode.py's arguments."""

import runpy
import sys
from pathlib import Path

LESSON = Path(__file__).resolve().parents[2] / "04_multinode"
sys.path[0] = str(LESSON)  # as `torchrun multinode.py` would set it

import snapshot_placement  # noqa: E402  (from the lesson folder just put on the path)
import torch.distributed as dist  # noqa: E402

from common.snapshot import load  # noqa: E402


def own_copy_only(snapshot_path: Path, keys: tuple[str, ...], device):
    """This rank's own snapshot, or None: no collective, no agreement."""
    if not snapshot_path.exists():
        return None
    state = load(snapshot_path, keys, map_location="cpu")
    return snapshot_placement.Resume(state, dist.get_rank(), snapshot_placement.node_rank())


# multinode.py imports the name from the module, so it gets this one.
snapshot_placement.newest_snapshot = own_copy_only
sys.argv[0] = str(LESSON / "multinode.py")
runpy.run_path(sys.argv[0], run_name="__main__")
