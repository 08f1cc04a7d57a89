"""Lesson 02, DDP's options: checkpoints of a DDP model, and the `module.` prefix.

`DDP(model)` holds the model as its attribute `module`, so the wrapper's state dict
names every tensor `module.<name>`; `model.module.state_dict()` names it `<name>`.
Rank 0 saves both; after a barrier, every rank loads each into a plain model and into
a DDP model, and the run prints what works, what fails (with PyTorch's error), and
the fix: `consume_prefix_in_state_dict_if_present`. `torch.compile(model)` adds a
prefix of its own, `_orig_mod.`; `model.compile()`, which compiles in place, adds none;
and `get_model_state_dict` (`torch.distributed.checkpoint.state_dict`) gives the names
without either prefix, from any of these. Every load maps the tensors to this rank's
device (`map_location`): a checkpoint saved on GPU 0 would otherwise load onto GPU 0.

Launch it (from any folder, with the path to this file):

    torchrun --standalone --nproc_per_node=2 ddp_checkpoints.py --folder /tmp/ddp_checkpoints
"""

from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import get_model_state_dict
from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present
from torch.nn.parallel import DistributedDataParallel as DDP

from common.cli import LessonArgumentParser
from common.data import IN_FEATURES
from common.distributed import device_for, end_process, log0, torchrun_env
from common.snapshot import save_atomic

LAUNCH = "torchrun --standalone --nproc_per_node=2 ddp_checkpoints.py --folder FOLDER"


def make_model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Linear(IN_FEATURES, 1)


def try_load(what: str, into: nn.Module, state: dict) -> None:
    """Load `state` into `into`; print whether it worked, or PyTorch's first lines."""
    try:
        into.load_state_dict(state)
        log0(f"{what}: loaded")
    except RuntimeError as error:
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        log0(f"{what}: RuntimeError: {' '.join(lines[:3])}")


def main() -> None:
    parser = LessonArgumentParser(description=__doc__.splitlines()[0], launch_hint=LAUNCH)
    parser.add_argument("--folder", type=Path, required=True, help="where rank 0 saves")
    args = parser.parse_args()
    local_rank, rank, _ = torchrun_env(launch_hint=LAUNCH)
    device = device_for(local_rank)
    dist.init_process_group(
        backend=dist.get_default_backend_for_device(device),
        device_id=device if device.type == "cuda" else None,  # nccl: this GPU, connect now
    )
    device_ids = [device.index] if device.type == "cuda" else None
    model = DDP(make_model(seed=0).to(device), device_ids=device_ids)
    wrapper_file, module_file = args.folder / "wrapper.pt", args.folder / "module.pt"
    if rank == 0:
        args.folder.mkdir(parents=True, exist_ok=True)
        save_atomic(model.state_dict(), wrapper_file)  # keys module.weight, module.bias
        save_atomic(model.module.state_dict(), module_file)  # keys weight, bias
    dist.barrier()  # nobody reads before rank 0 has written

    wrapper_state = torch.load(wrapper_file, map_location=device, weights_only=True)
    module_state = torch.load(module_file, map_location=device, weights_only=True)
    log0(f"model.state_dict() keys {list(wrapper_state)}")
    log0(f"model.module.state_dict() keys {list(module_state)}")
    log0(f"loaded onto {wrapper_state['module.weight'].device} (map_location={device})")

    try_load("module.pt into a plain model", make_model(seed=1).to(device), module_state)
    try_load("wrapper.pt into a plain model", make_model(seed=1).to(device), wrapper_state)
    other = DDP(make_model(seed=1).to(device), device_ids=device_ids)
    try_load("module.pt into a DDP model", other, module_state)
    try_load("module.pt into a DDP model's .module", other.module, module_state)

    consume_prefix_in_state_dict_if_present(wrapper_state, "module.")  # in place
    plain = make_model(seed=1).to(device)
    try_load("wrapper.pt, prefix consumed, into a plain model", plain, wrapper_state)
    same = torch.equal(plain.weight, model.module.weight)
    log0(f"after it, the plain model holds the saved weights: {same}")

    compiled = DDP(torch.compile(make_model(seed=0).to(device)), device_ids=device_ids)
    log0(f"DDP(torch.compile(model)).state_dict() keys {list(compiled.state_dict())}")
    in_place = make_model(seed=0).to(device)
    in_place.compile()  # compiles on the first call; the names stay
    in_place = DDP(in_place, device_ids=device_ids)
    log0(f"model.compile(), then DDP(model): state_dict() keys {list(in_place.state_dict())}")
    plain_names = list(get_model_state_dict(compiled))
    log0(f"get_model_state_dict(DDP(torch.compile(model))) keys {plain_names}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    end_process()  # not Python's teardown: see common.distributed.end_process
