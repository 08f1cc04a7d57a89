"""Lesson 01's ring stepper (`common/ring_stepper.py`): its states are a fresh simulation's
(worked out here, never the stepper's own numbers), its HTML loads nothing, and in chromium
the page shows them click after click, forward and back, for every world size 2 to 8."""

import json
from html.parser import HTMLParser

import pytest
import torch
from conftest import skip_or_fail
from test_course_slides_in_browser import in_chromium

from common.ring_sim import simulate_ring_all_reduce
from common.ring_stepper import stepper_html, stepper_states
from course import browser_check

WORLD_SIZES = range(2, 9)


def elements_for(world_size: int) -> int:
    return 2 * world_size  # the stepper's choice: two float32 values per chunk


def expected_steps(world_size: int) -> list[dict]:
    """Every step of the ring on `world_size` ranks: title, messages as [sender, receiver,
    chunk, elements], contributors[rank][chunk] sorted, bytes each rank has sent so far."""
    generator = torch.Generator().manual_seed(world_size)
    inputs = [torch.randn(elements_for(world_size), generator=generator) for _ in range(world_size)]
    steps, sent = [], [0] * world_size
    for step in simulate_ring_all_reduce(inputs).steps:
        for t in step.transfers:
            sent[t.sender] += 4 * t.values.numel()  # float32
        title = f"{step.phase} {step.number}/{world_size - 1}"  # each phase has N-1 steps
        if step.phase == "start":
            title = "start: each rank holds its own tensor"
        sends = [[t.sender, t.receiver, t.chunk, t.values.numel()] for t in step.transfers]
        held = [[sorted(ranks) for ranks in row] for row in step.contributors]
        steps.append(
            {
                "phase": step.phase,
                "number": step.number,
                "title": title,
                "transfers": sends,
                "contributors": held,
                "bytes": list(sent),
            }
        )
    assert len(steps) == 2 * (world_size - 1) + 1  # the start, then N-1 steps per phase
    return steps


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_the_states_are_the_simulations_at_every_step(world_size):
    states = stepper_states(world_size)
    assert states["elements"] == elements_for(world_size)
    assert states["tensor_bytes"] == 4 * elements_for(world_size)
    carried = [
        {
            "phase": state["phase"],
            "number": state["number"],
            "title": state["title"],
            "transfers": [
                [t["sender"], t["receiver"], t["chunk"], t["elements"]] for t in state["transfers"]
            ],
            "contributors": state["contributors"],
            "bytes": state["bytes_sent"],
        }
        for state in states["steps"]
    ]
    assert carried == expected_steps(world_size)
    for state in states["steps"]:
        assert all(t["bytes"] == 4 * t["elements"] for t in state["transfers"])


class Elements(HTMLParser):
    """Start tags with their attributes, end tags that do not close the innermost open
    element (misnested), and what each <script> and <style> holds, with its attributes."""

    VOID = {"meta", "link", "img", "br", "hr", "input"}

    def __init__(self):
        super().__init__()
        self.tags, self.open, self.misnested, self.contents = [], [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag not in self.VOID:
            self.open.append(tag)

    def handle_endtag(self, tag):
        if not self.open or self.open.pop() != tag:
            self.misnested.append(tag)

    def handle_data(self, data):
        if self.open and self.open[-1] in ("script", "style"):
            self.contents.append((self.open[-1], self.tags[-1][1], data))


def test_the_html_is_self_contained():
    html = stepper_html()
    parsed = Elements()
    parsed.feed(html)
    parsed.close()

    assert parsed.open == [] and parsed.misnested == []
    assert "http://" not in html and "https://" not in html
    # Nothing to load: no element names a resource, no style sheet imports one.
    for tag, attributes in parsed.tags:
        assert tag not in ("link", "img", "iframe"), tag
        assert {"src", "href", "srcset"}.isdisjoint(attributes), (tag, attributes)
    styles = [text for kind, _, text in parsed.contents if kind == "style"]
    assert styles and not any("url(" in s or "@import" in s for s in styles)
    # The states travel as JSON, for every world size the reader can choose.
    (data,) = [text for kind, a, text in parsed.contents if a.get("type") == "application/json"]
    assert json.loads(data) == {str(n): stepper_states(n) for n in WORLD_SIZES}
    # Each stepper has its own id, so that several can share a page.
    roots = [a["id"] for tag, a in parsed.tags if a.get("class") == "ring-stepper"]
    assert len(roots) == 1 and roots[0] not in stepper_html()


def test_a_world_size_it_cannot_show_is_refused():
    with pytest.raises(ValueError):
        stepper_html(world_sizes=[2, 3], start=4)
    with pytest.raises(ValueError):
        stepper_html(world_sizes=[1, 2], start=2)


# What a stepper shows, read from the page as a reader sees it (`root`: the stepper).
READ = """const read = root => {
  const part = role => root.querySelector(`[data-role="${role}"]`);
  const cells = Array.from(root.querySelectorAll("[data-contributors]"));
  const contributors = [];
  for (const cell of cells) {
    const row = (contributors[cell.dataset.rank] ||= []);
    row[cell.dataset.chunk] = cell.dataset.contributors.split(",").map(Number);
  }
  const marked = name => cells.filter(cell => cell.classList.contains(name))
    .map(cell => [Number(cell.dataset.rank), Number(cell.dataset.chunk)]);
  return {
    world_size: Number(root.dataset.worldSize),
    step: Number(root.dataset.step),
    title: part("title").textContent,
    contributors,
    bytes: Array.from(root.querySelectorAll("[data-bytes-sent]"), e => Number(e.dataset.bytesSent)),
    sending: marked("sending"),
    receiving: marked("receiving"),
  };
};
const press = (root, role) => root.querySelector(`[data-role="${role}"]`).click();
const choose = (root, worldSize) => {
  const select = root.querySelector('[data-role="world-size"]');
  select.value = String(worldSize);
  select.dispatchEvent(new Event("change"));
};
"""

# On the first stepper of the page: choose each world size, press next until it is
# disabled (the end), then back until that is disabled (the start), reading the stepper
# after every press. On the other two: press and choose on each, reading both after every
# move ([world size, step, ranks drawn] of each).
MOVES = (
    "(() => {"
    + READ
    + """
  const [root, one, two] = document.querySelectorAll(".ring-stepper");
  const walks = {first: read(root)};
  for (const option of root.querySelector('[data-role="world-size"]').options) {
    choose(root, option.value);
    const seen = [read(root)];
    for (const way of ["next", "back"]) {
      const button = root.querySelector(`[data-role="${way}"]`);
      for (let presses = 0; presses < 100 && !button.disabled; presses++) {
        press(root, way);
        seen.push(read(root));
      }
    }
    walks[option.value] = seen;
  }
  const both = () => [read(one), read(two)].map(s => [s.world_size, s.step, s.contributors.length]);
  const seen = [both()];
  press(one, "next"); press(one, "next"); seen.push(both());
  press(two, "next"); choose(two, 6); seen.push(both());
  press(two, "end"); press(one, "start"); seen.push(both());
  return [walks, new Set([root.id, one.id, two.id]).size, seen];
})()"""
)


def shown(world_size: int, index: int, step: dict) -> dict:
    """What the page shows at step `index`: messages as chunks marked on both ends."""
    return {
        "world_size": world_size,
        "step": index,
        "title": step["title"],
        "contributors": step["contributors"],
        "bytes": step["bytes"],
        "sending": sorted([sender, chunk] for sender, _, chunk, _ in step["transfers"]),
        "receiving": sorted([receiver, chunk] for _, receiver, chunk, _ in step["transfers"]),
    }


def test_the_page_shows_the_simulation_step_by_step_and_steppers_step_independently(tmp_path):
    skip_or_fail(browser_check.why_no_chromium())
    steppers = stepper_html(), stepper_html(start=3), stepper_html(world_sizes=[5, 6], start=5)
    page = '<!doctype html><html><head><meta charset="utf-8"><title>ring</title></head>'
    page += f"<body>{''.join(steppers)}</body></html>"
    problems, (walks, distinct, seen) = in_chromium(page, MOVES, tmp_path)

    assert problems == []
    assert walks.pop("first") == shown(4, 0, expected_steps(4)[0])  # it opens on 4 ranks
    assert sorted(walks, key=int) == [str(n) for n in WORLD_SIZES]
    for world_size in WORLD_SIZES:
        steps = expected_steps(world_size)
        forward = list(range(len(steps)))
        order = forward + forward[-2::-1]  # to the end, then back to the start
        expected = [shown(world_size, index, steps[index]) for index in order]
        assert walks[str(world_size)] == expected, f"{world_size} ranks"
    assert distinct == 3
    assert seen == [
        [[3, 0, 3], [5, 0, 5]],
        [[3, 2, 3], [5, 0, 5]],
        [[3, 2, 3], [6, 0, 6]],  # a new world size starts at the start
        [[3, 0, 3], [6, 10, 6]],  # 6 ranks: 2 x 5 steps after the start
    ]
