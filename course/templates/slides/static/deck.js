// A minimal slide viewer for nbconvert's reveal markup: each subslide is a page;
// fragments appear one per step. Keys: right/space/page down and left/page up step,
// Home/End jump, n shows speaker notes (cells typed "notes"; the lessons have none).
// The page number is kept in the address (#/3) so a reload stays on the same page.
(function () {
  "use strict";
  var pages = Array.prototype.slice.call(document.querySelectorAll(".deck > section > section"));
  var counter = document.querySelector(".deck-counter");
  var index = 0;

  function fragments(page) {
    return Array.prototype.slice.call(page.querySelectorAll(".fragment"));
  }

  function show(target, revealAll) {
    index = Math.max(0, Math.min(pages.length - 1, target));
    pages.forEach(function (page, i) {
      page.classList.toggle("current", i === index);
    });
    fragments(pages[index]).forEach(function (fragment) {
      fragment.classList.toggle("visible", revealAll);
    });
    counter.textContent = index + 1 + " / " + pages.length;
    history.replaceState(null, "", "#/" + (index + 1));
    window.scrollTo(0, 0);
  }

  function forward() {
    var hidden = fragments(pages[index]).filter(function (f) {
      return !f.classList.contains("visible");
    });
    if (hidden.length) hidden[0].classList.add("visible");
    else if (index < pages.length - 1) show(index + 1, false);
  }

  function back() {
    var shown = fragments(pages[index]).filter(function (f) {
      return f.classList.contains("visible");
    });
    if (shown.length) shown[shown.length - 1].classList.remove("visible");
    else if (index > 0) show(index - 1, true);
  }

  document.addEventListener("keydown", function (event) {
    if (event.altKey || event.ctrlKey || event.metaKey) return;
    var key = event.key;
    if (key === "ArrowRight" || key === " " || key === "PageDown") forward();
    else if (key === "ArrowLeft" || key === "PageUp") back();
    else if (key === "Home") show(0, false);
    else if (key === "End") show(pages.length - 1, true);
    else if (key === "n") document.body.classList.toggle("show-notes");
    else return;
    event.preventDefault();
  });

  document.addEventListener("click", function (event) {
    // Links, controls and outputs (an animation's buttons) keep their own clicks.
    if (event.target.closest("a, button, input, select, textarea, .jp-OutputArea")) return;
    if (event.clientX < window.innerWidth / 3) back();
    else forward();
  });

  if (pages.length) {
    var wanted = /^#\/(\d+)$/.exec(location.hash);
    show(wanted ? parseInt(wanted[1], 10) - 1 : 0, false);
  }
  document.body.setAttribute("data-deck-pages", String(pages.length));
})();
