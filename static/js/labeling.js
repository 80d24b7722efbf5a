// Keyboard-first labeling: every action is one key; keys pressed during a request are queued.
(function () {
  "use strict";

  var KEYS = {
    "1": "rate-pos", "+": "rate-pos", "=": "rate-pos",
    "0": "rate-neu",
    "-": "rate-neg", "_": "rate-neg",
    "f": "flag", "u": "undo", "Backspace": "undo",
    "g": "give-up", "b": "bad-problem", "Enter": "next",
  };
  var shownAt = performance.now();
  var pending = [];
  // From a panel request until its new panel has settled. A key pressed after the new panel
  // is in the page but before htmx has wired its buttons would click a dead button and be
  // lost, so it waits in `pending` like a key pressed during the request.
  // True from the start too: this script runs in <head>, before the panel exists and before
  // htmx wires its buttons (on DOMContentLoaded), so keys pressed until then wait here.
  var inFlight = true;

  function panel() { return document.getElementById("labeling"); }
  function fromPanel(e) { return e.detail.elt && e.detail.elt.closest && e.detail.elt.closest("#labeling"); }
  function retrying() { return window.stepwiseRetrying && window.stepwiseRetrying(); }
  function busy() {
    var p = panel();
    return inFlight || retrying() || (p && p.classList.contains("htmx-request"));
  }

  function perform(action) {
    var p = panel();
    if (!p) return false;
    var el = p.querySelector('[data-key-action="' + action + '"]');
    if (!el || el.disabled) return false;
    el.click();
    return true;
  }

  document.addEventListener("keydown", function (e) {
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    if (e.target.matches && e.target.matches("textarea, select, input[type=text], input[type=password]")) return;
    var key = e.key.length === 1 ? e.key.toLowerCase() : e.key;
    if (key === "r" && window.stepwiseRetry && window.stepwiseRetry()) { e.preventDefault(); return; }
    if (key === "?") {
      var guide = document.getElementById("guidelines-link");
      if (guide) { e.preventDefault(); window.open(guide.href, "stepwise-guidelines"); }
      return;
    }
    var action = KEYS[key];
    if (!action || !panel()) return;
    e.preventDefault();
    if (busy() && action !== "flag") { pending.push(action); return; }
    perform(action);
  });

  // Time on a step, measured in the browser, travels with the request that rates it.
  document.addEventListener("htmx:configRequest", function (e) {
    if (!e.detail.elt.closest || !e.detail.elt.closest("#labeling")) return;
    e.detail.parameters.elapsed_ms = Math.round(performance.now() - shownAt);
  });
  document.addEventListener("htmx:beforeRequest", function (e) { if (fromPanel(e)) inFlight = true; });
  document.addEventListener("htmx:afterRequest", function (e) {
    // A failed request swaps nothing: stop waiting. Keys pressed meanwhile wait for a retry
    // that is under way; otherwise they were meant for a state that never came: drop them
    // (the failure banner offers the retry).
    if (fromPanel(e) && !e.detail.successful) {
      inFlight = false;
      if (!retrying()) pending = [];
    }
  });
  document.addEventListener("stepwise:retryGaveUp", function () { pending = []; });
  // htmx (a deferred script) wires the panel's buttons in its own DOMContentLoaded handler,
  // registered after this one: act on the first waiting key once that has run.
  document.addEventListener("DOMContentLoaded", function () {
    setTimeout(function () {
      inFlight = false;
      document.documentElement.dataset.keys = "ready";  // tests wait for this
      if (pending.length) perform(pending.shift());
    }, 0);
  });
  document.addEventListener("htmx:afterSettle", function (e) {
    if (!panel()) return;
    inFlight = false;
    shownAt = performance.now();
    var current = panel().querySelector(".step.current");
    if (current) current.scrollIntoView({ block: "nearest", behavior: "smooth" });
    if (pending.length) perform(pending.shift());
  });
})();
