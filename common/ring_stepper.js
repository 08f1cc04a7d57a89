// The ring all-reduce stepper's script (common/ring_stepper.py writes it into the page,
// inside a function of its own, and calls ringStepper on the stepper's root element).
//
// It computes nothing about the ring: every state comes from the JSON that Python wrote
// beside it (common.ring_sim's record), and this draws the one chosen. What it draws is
// also left in data- attributes (the step on the root, the contributors on each chunk,
// the bytes on each rank) so that a test can read the page as a reader sees it.
"use strict";

function ringStepper(root) {
  const states = JSON.parse(root.querySelector('[data-role="states"]').textContent);
  const part = (role) => root.querySelector(`[data-role="${role}"]`);
  const select = part("world-size");
  let index = 0;

  const current = () => states[select.value];

  // Lighter for a chunk that holds few ranks' inputs, darker as it fills up; the full
  // sum also gets a frame and a sigma (the CSS class "full"), as in the lesson's figure.
  function colour(count, worldSize) {
    const lightness = 96 - (56 * (count - 1)) / Math.max(1, worldSize - 1);
    return `hsl(210, 70%, ${lightness}%)`;
  }

  function element(tag, className, text) {
    const made = document.createElement(tag);
    if (className) made.className = className;
    if (text !== undefined) made.textContent = text;
    return made;
  }

  function rankRow(ring, step, rank) {
    const row = element("div", "ring-stepper-rank");
    row.dataset.rank = rank;
    row.appendChild(element("span", "ring-stepper-name", `rank ${rank}`));
    const chunks = element("span", "ring-stepper-chunks");
    step.contributors[rank].forEach((held, chunk) => {
      const full = held.length === ring.world_size;
      const cell = element("span", "ring-stepper-chunk", full ? "\u03A3" : held.join(""));
      cell.dataset.rank = rank;
      cell.dataset.chunk = chunk;
      cell.dataset.contributors = held.join(",");
      cell.title = `chunk ${chunk}: the inputs of rank${held.length > 1 ? "s" : ""} ${held.join(", ")}`;
      cell.style.background = colour(held.length, ring.world_size);
      cell.classList.toggle("full", full);
      cell.classList.toggle("dark", held.length > ring.world_size / 2);
      for (const t of step.transfers) {
        if (t.chunk === chunk && t.sender === rank) cell.classList.add("sending");
        if (t.chunk === chunk && t.receiver === rank) cell.classList.add("receiving");
      }
      chunks.appendChild(cell);
    });
    row.appendChild(chunks);
    const bytes = step.bytes_sent[rank];
    const sent = element("span", "ring-stepper-bytes");
    sent.dataset.bytesSent = bytes;
    const share = (bytes / ring.tensor_bytes).toFixed(2);
    sent.textContent = `${bytes} B sent, ${share} \u00D7 its ${ring.tensor_bytes} B tensor`;
    row.appendChild(sent);
    return row;
  }

  // A first row with each chunk's number above its column.
  function chunkNumbers(count) {
    const row = element("div", "ring-stepper-rank ring-stepper-heading");
    row.appendChild(element("span", "ring-stepper-name", "chunk"));
    const numbers = element("span", "ring-stepper-chunks");
    for (let chunk = 0; chunk < count; chunk++) {
      numbers.appendChild(element("span", "ring-stepper-chunk", String(chunk)));
    }
    row.appendChild(numbers);
    return row;
  }

  function draw() {
    const ring = current();
    const step = ring.steps[index];
    root.dataset.worldSize = ring.world_size;
    root.dataset.step = index;
    root.dataset.steps = ring.steps.length;
    part("title").textContent = step.title;
    const ranks = part("ranks");
    ranks.replaceChildren(chunkNumbers(ring.world_size));
    for (let rank = 0; rank < ring.world_size; rank++) {
      ranks.appendChild(rankRow(ring, step, rank));
    }
    const messages = step.transfers.map(
      (t) => `rank ${t.sender} \u2192 rank ${t.receiver}: chunk ${t.chunk} (${t.bytes} B)`,
    );
    part("transfers").textContent = messages.length
      ? `Messages of this step: ${messages.join("; ")}.`
      : "No message sent yet.";
    part("start").disabled = part("back").disabled = index === 0;
    part("end").disabled = part("next").disabled = index === ring.steps.length - 1;
  }

  function go(target) {
    index = Math.max(0, Math.min(current().steps.length - 1, target));
    draw();
  }

  part("start").addEventListener("click", () => go(0));
  part("back").addEventListener("click", () => go(index - 1));
  part("next").addEventListener("click", () => go(index + 1));
  part("end").addEventListener("click", () => go(current().steps.length - 1));
  select.addEventListener("change", () => go(0));
  draw();
}
