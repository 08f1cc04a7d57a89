"""Answers to the coding exercises that their checks must judge right: plausible
mistakes, each of which must fail its check with a message that says what is wrong,
and correct answers unlike the solution, each of which must pass (tests/test_course_exercises.py
runs them)."""

from atomic_save_answers import ATOMIC_SAVE_RIGHT, ATOMIC_SAVE_WRONG

# Plausible mistakes, each made by editing the solution: (lesson, exercise, what the
# mistake is, text of the solution, replaced by, what the failed check must say); with
# None for the text of the solution, the mistake is a whole file.
WRONG = [
    (
        "00_intro",
        "gather_pids",
        "ignores what all_gather received",
        "return [int(pid) for pid in everyone]",
        "return [int(mine)] * world_size",
        r"rank \d: expected the pids of ranks 0..1",
    ),
    (
        "00_intro",
        "gather_pids",
        "sorts the pids by value",
        "return [int(pid) for pid in everyone]",
        "return sorted(int(pid) for pid in everyone)",
        r"rank \d: got the pids of ranks 0..1 in another order, \[\d+, \d+\]; expected \[",
    ),
    (
        "01_theory",
        "ring",
        "forgets the all-gather",
        "        pass_right(chunks, sending, add=False)",
        "        pass",
        r"then 1 with add=False \(all-gather\); yours called pass_right with add=\[True\]",
    ),
    (
        "01_theory",
        "ring",
        "sends the wrong chunk in the reduce-scatter",
        "sending = [(rank - step) % world_size",
        "sending = [(rank + step) % world_size",
        r"N = 3 ranks, .*: rank \d should hold the sum",
    ),
    (
        "01_theory",
        "ring",
        "sends a tensor of chunk indices",
        "sending = [(rank - step) % world_size for rank in range(world_size)]",
        "sending = (torch.arange(world_size) - step) % world_size",
        r"sending must be a list of Python ints, one chunk index \(0..1\) per rank; got a "
        r"tensor, tensor\(\[0, 1\]\) \(\.tolist\(\) turns it into one\)",
    ),
    (
        "02_multigpu",
        "accumulate",
        "all-reduces in every micro-batch's backward",
        "sync = contextlib.nullcontext() if last else model.no_sync()",
        "sync = contextlib.nullcontext()",
        r"rank \d: DDP all-reduced the gradients 12 times in 3 steps of 4 micro-batches",
    ),
    (
        "02_multigpu",
        "fp16_hook",
        "sends the sum, not the average",
        "compressed = buffer.to(torch.float16).div_(dist.get_world_size(group))",
        "compressed = buffer.to(torch.float16)",
        r"rank \d: the weights differ from one process .* is the bucket divided by the world",
    ),
    (
        "02_multigpu",
        "fp16_hook",
        "sends float32",
        "compressed = buffer.to(torch.float16).div_(",
        "compressed = buffer.clone().div_(",
        r"rank \d: your hook handed all_reduce tensors of \['torch.float32'\]; expected float16",
    ),
    (
        "02_multigpu",
        "fp16_hook",
        "gives DDP the float16 sum instead of the float32 bucket",
        "        buffer.copy_(done.value()[0])  # back to float32, in DDP's own bucket\n"
        "        return buffer",
        "        return done.value()[0]",
        r"rank \d: your hook's Future gave a torch.float16 tensor; expected the float32 bucket",
    ),
    (
        "02_multigpu",
        "accumulate",
        "adds up the micro-batches' losses instead of averaging them",
        " / len(micro_batches)",
        "",
        r"rank \d: the weights differ from one process trained on the whole batches.*: they "
        r"are what gradients 4 times too large give; .*divide each micro-batch's loss by 4",
    ),
    (
        "02_multigpu",
        "accumulate",
        "all-reduces in the first micro-batch's backward instead of the last's",
        "last = index == len(micro_batches) - 1",
        "last = index == 0",
        r"rank 1's weights differ from rank 0's .*: the gradients of the micro-batches after "
        r"the all-reduce were never averaged over the ranks",
    ),
    (
        "02_multigpu",
        "accumulate",
        "divides the gradients by the world size too (DDP has averaged them already)",
        "    optimizer.step()",
        "    for parameter in model.parameters():\n"
        "        parameter.grad /= torch.distributed.get_world_size()\n"
        "    optimizer.step()",
        r"rank \d: the weights differ .*: they are what gradients 2 times too small give; DDP "
        r"already averages",
    ),
    (
        "02_multigpu",
        "accumulate",
        "divides by the number of micro-batches twice (the losses, then the gradients)",
        "    optimizer.step()",
        "    for parameter in model.parameters():\n"
        "        parameter.grad /= len(micro_batches)\n"
        "    optimizer.step()",
        r"rank \d: the weights differ .*: they are what gradients 4 times too small give; "
        r".*divided by the number of micro-batches twice",
    ),
    *ATOMIC_SAVE_WRONG,
    (
        "03_fault_tolerance",
        "stop_agreement",
        "answers from its own flag",
        "    dist.all_reduce(flag, op=dist.ReduceOp.MAX)\n",
        "",
        r"rank 0: answered \[False(, False){7}\], stopping at step None",
    ),
    (
        "03_fault_tolerance",
        "stop_agreement",
        "a rank that was asked returns before the all-reduce",
        "    flag = torch.tensor([int(asked)])",
        "    if asked:\n        return True\n    flag = torch.tensor([int(asked)])",
        r"rank [02] waited in a collective that rank 1 never joined: rank 1 finished the "
        r"exercise without it",
    ),
    (
        "03_fault_tolerance",
        "stop_agreement",
        "returns the one-element tensor, not a bool",
        "    return bool(flag.item())",
        "    return flag",
        r"rank 0 returned tensor\(\[0\]\) \(a Tensor\), not a bool: return the agreed answer",
    ),
    (
        "04_multinode",
        "hostlist",
        "splits at every comma, brackets or not",
        "position = match.end() + 1",
        "position = match.end() + 1\n        break",
        r"expand_hostlist\('node\[01-03,07\],gpu5'\): expected",
    ),
    (
        "04_multinode",
        "hostlist",
        "drops the leading zeros",
        'hosts.append(f"{prefix}{number:0{width}d}{suffix}")',
        'hosts.append(f"{prefix}{number}{suffix}")',
        r"expected \['node01', 'node02', 'node03', 'node07', 'gpu5'\], got \['node1'",
    ),
    (
        "04_multinode",
        "global_rank",
        "assumes every node runs as many processes as this one",
        "return sum(nproc_per_node[:node_rank]) + local_rank",
        "return node_rank * nproc_per_node[node_rank] + local_rank",
        r"nodes running \[3, 1\] processes: node 1's local rank 0 is global rank 3, got 1",
    ),
    (
        "05_mingpt",
        "attention",
        "adds a float mask of ones (the official minGPT's mistake)",
        'scores = scores.masked_fill(future, float("-inf"))',
        "scores = scores + torch.ones(time, time).tril()",
        r"moved the outputs at positions 0..0 .*the attention sees the future",
    ),
    (
        "05_mingpt",
        "attention",
        "masks the diagonal too",
        "triu(diagonal=1)",
        "triu(diagonal=0)",
        r"shape \(1, 1, 1, 4\): the output is NaN at positions \[0\].*"
        r"position t must see positions 0..t, itself included",
    ),
    (
        "05_mingpt",
        "attention",
        "forgets the scale",
        " * head_size**-0.5",
        "",
        r"differs from scaled_dot_product_attention\(is_causal=True\)",
    ),
]


# Correct answers unlike the solution, each of which must pass its check: (lesson,
# exercise, what differs, text of the solution, replaced by); None as above.
RIGHT = [
    *ATOMIC_SAVE_RIGHT,
]
