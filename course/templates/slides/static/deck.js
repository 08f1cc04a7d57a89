// A minimal slide viewer for nbconvert's reveal markup: each subslide is a page;
// fragments appear one per step. Keys: right/space/page down and left/page up step,
// Home/End jump, n shows the speaker notes on the slide (cells typed "notes"), s opens
// the speaker window. The page number is kept in the address (#/3) so that a reload
// stays on the same page.
//
// The speaker window is this same deck at #speaker/3: the page at the left, and beside
// it the page's notes, the next page's title and the time since the window opened. The
// two windows step together: each tells the other (postMessage) where it is after a step.
(function () {
  "use strict";
  var pages = Array.prototype.slice.call(document.querySelectorAll(".deck > section > section"));
  var counter = document.querySelector(".deck-counter");
  var speaker = /^#speaker\//.test(location.hash);
  var partner = speaker ? window.opener : null; // the other window, once known
  var index = 0;
  var stepped = false; // has this window stepped since it opened?

  function fragments(page) {
    return Array.prototype.slice.call(page.querySelectorAll(".fragment"));
  }

  function shown(page) {
    return fragments(page).filter(function (f) {
      return f.classList.contains("visible");
    });
  }

  // Show page `target` with its first `visible` fragments (all of them if true).
  function show(target, visible) {
    index = Math.max(0, Math.min(pages.length - 1, target));
    pages.forEach(function (page, i) {
      page.classList.toggle("current", i === index);
    });
    fragments(pages[index]).forEach(function (fragment, i) {
      fragment.classList.toggle("visible", visible === true || i < visible);
    });
    counter.textContent = index + 1 + " / " + pages.length;
    history.replaceState(null, "", (speaker ? "#speaker/" : "#/") + (index + 1));
    window.scrollTo(0, 0);
    if (speaker) describe();
  }

  // `welcome` marks the answer to a new speaker window's hello.
  function tell(welcome) {
    if (partner && !partner.closed) {
      var where = { deckPage: index, deckShown: shown(pages[index]).length };
      if (welcome) where.deckWelcome = true;
      partner.postMessage(where, "*");
    }
  }

  function forward() {
    var hidden = fragments(pages[index]).filter(function (f) {
      return !f.classList.contains("visible");
    });
    if (hidden.length) hidden[0].classList.add("visible");
    else if (index < pages.length - 1) show(index + 1, 0);
  }

  function back() {
    var visible = shown(pages[index]);
    if (visible.length) visible[visible.length - 1].classList.remove("visible");
    else if (index > 0) show(index - 1, true);
  }

  // The speaker's panel: this page's notes, the next page's title, the time.
  var panel = null;
  var opened = Date.now();
  function describe() {
    if (!panel) {
      panel = document.createElement("aside");
      panel.className = "deck-speaker";
      document.body.appendChild(panel);
      document.body.classList.add("speaker");
      setInterval(function () {
        var seconds = Math.floor((Date.now() - opened) / 1000);
        var clock = panel.querySelector(".deck-clock");
        var pad = seconds % 60 < 10 ? ":0" : ":";
        clock.textContent = Math.floor(seconds / 60) + pad + (seconds % 60);
      }, 1000);
    }
    var notes = pages[index].querySelectorAll("aside.notes");
    var next = pages[index + 1] && pages[index + 1].querySelector("h1, h2, h3");
    panel.innerHTML =
      '<p class="deck-clock">0:00</p><h2>Notes</h2><div class="deck-notes"></div>' +
      '<p class="deck-next"></p>';
    var text = panel.querySelector(".deck-notes");
    notes.forEach(function (note) {
      text.insertAdjacentHTML("beforeend", note.innerHTML);
    });
    if (!notes.length) text.textContent = "(no notes for this page)";
    panel.querySelector(".deck-next").textContent = next
      ? "Next: " + next.textContent.replace("¶", "")
      : index < pages.length - 1 ? "Next: a page without a heading" : "The last page.";
  }

  window.addEventListener("message", function (event) {
    var data = event.data || {};
    if (data.deckHello) partner = event.source; // a speaker window opened from here
    // The deck's answer to our hello is stale if the speaker has stepped meanwhile:
    // following it would undo that step here but not in the deck.
    if (data.deckWelcome && stepped) return;
    if (typeof data.deckPage === "number") show(data.deckPage, data.deckShown);
    else if (data.deckHello) tell(true);
  });

  document.addEventListener("keydown", function (event) {
    if (event.altKey || event.ctrlKey || event.metaKey) return;
    var key = event.key;
    if (key === "ArrowRight" || key === " " || key === "PageDown") forward();
    else if (key === "ArrowLeft" || key === "PageUp") back();
    else if (key === "Home") show(0, 0);
    else if (key === "End") show(pages.length - 1, true);
    else if (key === "n") document.body.classList.toggle("show-notes");
    else if (key === "s" && !speaker) {
      window.open(location.pathname + "#speaker/" + (index + 1), "deck-speaker");
      return;
    } else return;
    event.preventDefault();
    stepped = true;
    tell();
  });

  document.addEventListener("click", function (event) {
    // Links, controls and outputs (an animation's buttons) keep their own clicks.
    if (event.target.closest("a, button, input, select, textarea, .jp-OutputArea, .deck-speaker"))
      return;
    if (event.clientX < window.innerWidth / 3) back();
    else forward();
    stepped = true;
    tell();
  });

  if (pages.length) {
    var wanted = /^#(?:speaker)?\/(\d+)$/.exec(location.hash);
    show(wanted ? parseInt(wanted[1], 10) - 1 : 0, 0);
  }
  if (partner) partner.postMessage({ deckHello: true }, "*");
  document.body.setAttribute("data-deck-pages", String(pages.length));
})();
