"""The ring all-reduce as an interactive stepper, for a web page or a notebook.

Introduced in 01_theory, after the ring's figures and animation (`common.viz`): the
reader picks 2 to 8 ranks and steps forward and back through the reduce-scatter and the
all-gather, each chunk coloured by how many ranks' inputs it holds, with the bytes each
rank has sent so far beside it.

Every state the page shows is computed here, by `common.ring_sim`, and written into the
page as JSON: the page's script (`ring_stepper.js`, styled by `ring_stepper.css`) only
draws the state it is told to, so what the reader sees is the simulation's record and
nothing recomputed. The HTML is self-contained (no file or address loaded from
anywhere), so it works offline, on the course site, in a slide deck and in Jupyter
(where a trusted notebook runs its outputs' scripts).
"""

import json
import uuid
from pathlib import Path

import torch

from common.ring_sim import simulate_ring_all_reduce

HERE = Path(__file__).resolve().parent


def stepper_states(world_size: int, elements: int | None = None) -> dict:
    """The ring on `world_size` ranks, each holding `elements` float32 values (default:
    two per chunk, as in the lesson's figure), as a JSON-able dict whose "steps" are the
    simulation's steps, the start first. Each step gives its phase and number, a title,
    the messages sent during it, contributors[rank][chunk] (the ranks whose inputs that
    chunk holds afterwards, sorted) and the bytes each rank has sent up to and with it."""
    elements = 2 * world_size if elements is None else elements
    # The values do not matter to what is drawn; rank r's are r*100 + 0, 1, 2, ... so that
    # they are all different, and float32 so that an element is 4 bytes, as in training.
    inputs = [
        torch.arange(elements, dtype=torch.float32) + 100 * rank for rank in range(world_size)
    ]
    record = simulate_ring_all_reduce(inputs)
    bytes_sent = [0] * world_size
    steps = []
    for index, step in enumerate(record.steps):
        transfers = []
        for transfer in step.transfers:
            size = transfer.values.numel()
            sent = size * transfer.values.element_size()
            bytes_sent[transfer.sender] += sent
            transfers.append(
                {
                    "sender": transfer.sender,
                    "receiver": transfer.receiver,
                    "chunk": transfer.chunk,
                    "elements": size,
                    "bytes": sent,
                }
            )
        steps.append(
            {
                "phase": step.phase,
                "number": step.number,
                "title": record.step_title(index),  # as the figures
                "transfers": transfers,
                "contributors": [[sorted(held) for held in row] for row in step.contributors],
                "bytes_sent": list(bytes_sent),  # a copy: the next step adds to the running one
            }
        )
    return {
        "world_size": world_size,
        "elements": elements,
        "tensor_bytes": elements * inputs[0].element_size(),
        "steps": steps,
    }


def stepper_html(world_sizes=range(2, 9), start: int = 4) -> str:
    """One self-contained HTML fragment: the stepper, showing `start` ranks first, with a
    choice of every world size in `world_sizes`. Several can share a page: each has its
    own id, and its script keeps everything inside a function of its own."""
    world_sizes = list(world_sizes)
    if start not in world_sizes or min(world_sizes) < 2:
        raise ValueError(f"start ({start}) must be one of world_sizes, all at least 2")
    states = {str(n): stepper_states(n) for n in world_sizes}
    # "</" would end the <script> element that holds the JSON; "<\/" is the same JSON.
    data = json.dumps(states, separators=(",", ":")).replace("</", "<\\/")
    options = "".join(
        f'<option value="{n}"{" selected" if n == start else ""}>{n}</option>' for n in world_sizes
    )
    root_id = f"ring-stepper-{uuid.uuid4().hex[:12]}"
    style = (HERE / "ring_stepper.css").read_text(encoding="utf-8")
    script = (HERE / "ring_stepper.js").read_text(encoding="utf-8")
    return f"""<div class="ring-stepper" id="{root_id}">
<style>{style}</style>
<div class="ring-stepper-controls">
<label>ranks <select data-role="world-size">{options}</select></label>
<button type="button" data-role="start">&#x00AB; start</button>
<button type="button" data-role="back">&#x25C0; back</button>
<button type="button" data-role="next">next &#x25B6;</button>
<button type="button" data-role="end">end &#x00BB;</button>
</div>
<p class="ring-stepper-title" data-role="title"></p>
<div class="ring-stepper-ranks" data-role="ranks">The stepper needs JavaScript: in Jupyter,
run the cell (or trust the notebook) to see it.</div>
<p class="ring-stepper-transfers" data-role="transfers"></p>
<p class="ring-stepper-legend">Each square is a chunk; its digits are the ranks whose
inputs it holds, &Sigma; (framed) the full sum. Orange: dashed, the chunk a rank sends in
this step; solid, where it arrives. A step shows the buffers once its messages have arrived.</p>
<script type="application/json" data-role="states">{data}</script>
<script>
(function () {{
{script}
ringStepper(document.getElementById("{root_id}"));
}})();
</script>
</div>"""
