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
    // Enter and Space on a focused top-bar control (the theme toggle, a link) act on it.
    if ((key === "Enter" || key === " ") && e.target.closest && e.target.closest(".topbar")) return;
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
  // The claim (lease) on this solution: announced before it runs out, and extended while the
  // labeler is active on the page, so work in progress is not taken from someone still at it.
  var WARN_MS = 2 * 60 * 1000;
  var lastExtend = Date.now();  // the page was served with a fresh lease
  var extending = false;
  function leaseLeft() {
    var p = panel();
    var at = p && p.dataset.leaseExpires;
    return at ? Date.parse(at) - Date.now() : null;
  }
  function showLease() {
    var warn = document.getElementById("lease-warning");
    var left = leaseLeft();
    if (!warn || left === null) return;
    if (left > WARN_MS) { warn.hidden = true; return; }
    if (left <= 0) {
      warn.textContent = "Your claim on this solution has run out: press a key or rate a step to take it back, if it still has room.";
    } else {
      var minutes = Math.ceil(left / 60000);
      warn.textContent = minutes + " minute" + (minutes > 1 ? "s" : "") +
        " left on this solution: press a key or rate a step to keep it.";
    }
    warn.hidden = false;
  }
  function csrfToken() {
    try { return JSON.parse(document.body.getAttribute("hx-headers"))["X-CSRFToken"]; } catch (e) { return ""; }
  }
  function extendLease() {
    var p = panel();
    if (!p || !p.dataset.extendUrl) return;
    lastExtend = Date.now();
    extending = true;
    fetch(p.dataset.extendUrl, { method: "POST", credentials: "same-origin", headers: { "X-CSRFToken": csrfToken() } })
      .then(function (r) { return r.json().then(function (body) { return { ok: r.ok, body: body }; }); })
      .then(function (answer) {
        var q = panel();
        if (!q) return;
        if (answer.ok) {
          q.dataset.leaseExpires = answer.body.lease_expires_at;
          showLease();
        } else {  // taken by others meanwhile: say so, and stop extending
          delete q.dataset.leaseExpires;
          var warn = document.getElementById("lease-warning");
          if (warn) { warn.textContent = answer.body.detail; warn.hidden = false; }
        }
      })
      .catch(function () { lastExtend = 0; })  // offline: the next activity tries again
      .then(function () { extending = false; });
  }
  function onActivity() {
    var left = leaseLeft();
    if (left === null) return;
    // At most once a minute while all is well; at once (one request at a time) when the
    // warning shows.
    if (extending) return;
    if (Date.now() - lastExtend > 60000 || left < WARN_MS) extendLease();
  }
  ["keydown", "pointerdown", "wheel", "touchstart"].forEach(function (type) {
    document.addEventListener(type, onActivity, { passive: true });
  });
  setInterval(showLease, 10000);
  document.addEventListener("DOMContentLoaded", showLease);

  document.addEventListener("htmx:afterSettle", function (e) {
    if (!panel()) return;
    inFlight = false;
    lastExtend = Date.now();  // a rating renews the lease on the server
    showLease();
    shownAt = performance.now();
    var current = panel().querySelector(".step.current");
    if (current) current.scrollIntoView({ block: "nearest", behavior: "smooth" });
    if (pending.length) perform(pending.shift());
  });
})();
