// Keyboard-first labeling: every action is one key; keys pressed during a request are queued.
(function () {
  "use strict";

  // The key map comes from the list the page's help is rendered from (LABELING_KEYS in
  // labeling/views/labeler.py), so the help and these handlers cannot drift apart.
  var KEYS = JSON.parse(document.currentScript.dataset.keys || "{}");
  // Acting on the selected step, when one is selected: its own buttons, not the current step's.
  var STEP_ACTIONS = { "rate-pos": true, "rate-neu": true, "rate-neg": true, "again": true, "accept": true };
  var shownAt = performance.now();
  var keepStepTime = false;
  var pending = [];
  // From a panel request until its new panel has settled. A key pressed after the new panel
  // is in the page but before htmx has wired its buttons would click a dead button and be
  // lost, so it waits in `pending` like a key pressed during the request.
  // True from the start too: this script runs in <head>, before the panel exists and before
  // htmx wires its buttons (on DOMContentLoaded), so keys pressed until then wait here.
  var inFlight = true;
  var helpOpener = null;

  function panel() { return document.getElementById("labeling"); }
  function help() { return document.getElementById("key-help"); }
  function helpOpen() { var d = help(); return !!(d && d.open); }
  function fromPanel(e) { return e.detail.elt && e.detail.elt.closest && e.detail.elt.closest("#labeling"); }
  function retrying() { return window.stepwiseRetrying && window.stepwiseRetrying(); }
  function busy() {
    var p = panel();
    return inFlight || retrying() || (p && p.classList.contains("htmx-request"));
  }

  // Revisiting: a rated step picked in the mini-map (or with [ and ]) is selected; keys 1, 0
  // and A act on it until Esc (or a change, which brings back a new panel) returns to the
  // current step. The selection lives in the page: a new panel starts without one.
  function selectedIndex() {
    var p = panel();
    return p && p.dataset.selected !== undefined ? Number(p.dataset.selected) : null;
  }
  function select(index) {
    var p = panel();
    if (!p) return false;
    var step = index === null ? null : p.querySelector('.step.rated[data-step="' + index + '"]');
    var cell = index === null ? null : p.querySelector('.map-cell[data-select-step="' + index + '"]');
    if (index !== null && (!step || !cell)) return false;  // not rated, or not revisable
    p.querySelectorAll(".step.selected").forEach(function (el) { el.classList.remove("selected"); });
    p.querySelectorAll('.map-cell[aria-pressed="true"]').forEach(function (el) { el.setAttribute("aria-pressed", "false"); });
    if (index === null) {
      delete p.dataset.selected;
      var current = p.querySelector(".step.current");
      if (current) current.scrollIntoView({ block: "nearest" });
      return true;
    }
    p.dataset.selected = String(index);
    step.classList.add("selected");
    cell.setAttribute("aria-pressed", "true");
    step.scrollIntoView({ block: "nearest" });
    return true;
  }
  function selectBy(offset) {
    var p = panel();
    var cells = p ? p.querySelectorAll(".map-cell[data-select-step]") : [];
    if (!cells.length) return false;
    var at = selectedIndex();
    var last = Number(cells[cells.length - 1].dataset.selectStep);
    if (at === null) return offset < 0 ? select(last) : false;
    var next = at + offset;
    if (next > last) return select(null);  // past the last rated step: back to the current one
    return next >= 0 ? select(next) : false;
  }

  function openHelp() {
    var d = help();
    if (!d || d.open) return;
    helpOpener = document.activeElement;
    d.showModal();
    showMoreKeysCue();
  }
  // In a short window the list scrolls: a line under it says so until its last key shows.
  function showMoreKeysCue() {
    var d = help();
    var list = d && d.querySelector(".keys");
    var cue = d && d.querySelector(".scroll-cue");
    if (!list || !cue) return;
    cue.hidden = list.scrollTop + list.clientHeight >= list.scrollHeight - 1;
  }
  document.addEventListener("scroll", function (e) {
    if (e.target.closest && e.target.closest("#key-help")) showMoreKeysCue();
  }, true);
  window.addEventListener("resize", function () { if (helpOpen()) showMoreKeysCue(); });
  document.addEventListener("close", function (e) {
    if (e.target !== help()) return;
    // Back where the labeler was; a panel swapped meanwhile leaves the page's start.
    var back = helpOpener && document.body.contains(helpOpener) ? helpOpener : null;
    helpOpener = null;
    if (back && back.focus) back.focus();
  }, true);

  // The alternatives protocol: one candidate of the open step is selected (arrows or j/k);
  // the rating keys and Enter act on it. After each answer the selection moves to the next
  // candidate still unrated, then to the likely choice (the first +1).
  var CANDIDATE_ACTIONS = { "rate-pos": true, "rate-neu": true, "rate-neg": true, "choose": true };
  var candidateFocus = null;
  var candidateStep = null;
  function candidates() {
    var p = panel();
    return p ? Array.prototype.slice.call(p.querySelectorAll(".candidate")) : [];
  }
  function focusCandidate(index, scroll) {
    var list = candidates();
    list.forEach(function (el) { el.classList.remove("focused"); });
    if (!list.length) { candidateFocus = null; return false; }
    candidateFocus = Math.max(0, Math.min(index, list.length - 1));
    list[candidateFocus].classList.add("focused");
    if (scroll) list[candidateFocus].scrollIntoView({ block: "nearest" });
    return true;
  }
  function refocusCandidates() {
    var p = panel();
    var list = candidates();
    if (!p || !list.length) { candidateFocus = null; return; }
    var step = p.dataset.stepIndex;
    if (step !== candidateStep) { candidateStep = step; candidateFocus = null; }
    var unrated = function (el) { return !el.hasAttribute("data-rating"); };
    var from = candidateFocus === null ? 0 : candidateFocus;
    if (from < list.length && unrated(list[from])) { focusCandidate(from, false); return; }
    for (var i = 1; i <= list.length; i++) {
      var at = (from + i) % list.length;
      if (unrated(list[at])) { focusCandidate(at, true); return; }
    }
    var likely = list.findIndex(function (el) { return el.dataset.rating === "1"; });
    focusCandidate(likely >= 0 ? likely : from, true);
  }

  // The labeler's own step: a box with a live preview of its math; its draft survives the
  // panel's swaps while the step stays the same.
  var draft = { step: null, text: "", open: false };
  function writeBox() { return document.getElementById("write-step"); }
  function openWriteBox() {
    var form = writeBox();
    if (!form) return false;
    form.hidden = false;
    draft.open = true;
    draft.step = panel() && panel().dataset.stepIndex;
    form.querySelector("textarea").focus();
    return true;
  }
  function closeWriteBox() {
    var form = writeBox();
    if (!form) return;
    form.hidden = true;
    draft.open = false;
    if (document.activeElement && form.contains(document.activeElement)) document.activeElement.blur();
  }
  function showPreview() {
    var form = writeBox();
    if (!form) return;
    var preview = form.querySelector(".write-preview");
    preview.textContent = form.querySelector("textarea").value;
    if (window.stepwiseRenderMath) window.stepwiseRenderMath(preview);
  }
  function restoreDraft() {
    var form = writeBox();
    var p = panel();
    if (!form || !p || draft.step !== p.dataset.stepIndex) {
      draft = { step: null, text: "", open: false };
      return;
    }
    form.querySelector("textarea").value = draft.text;
    showPreview();
    if (draft.open) { form.hidden = false; form.querySelector("textarea").focus(); }
  }
  document.addEventListener("input", function (e) {
    if (!e.target.closest || !e.target.closest("#write-step")) return;
    draft.text = e.target.value;
    draft.step = panel() && panel().dataset.stepIndex;
    showPreview();
  });
  document.addEventListener("keydown", function (e) {
    if (!e.target.closest || !e.target.closest("#write-step textarea")) return;
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) {
      e.preventDefault();
      var send = writeBox().querySelector("[data-write-submit]");
      if (send && !busy()) send.click();
    } else if (e.key === "Escape") {
      e.preventDefault();
      closeWriteBox();
    }
  });

  // Notes: their own form beside the panel, sent on their own (never with a rating). N fills
  // in the selected step (or the last one rated) and puts the cursor in the text. Step by
  // step, the step whose candidates are being rated comes first, and a path step the labeler
  // wrote without rating any candidate is no rated step.
  function lastRatedIndex() {
    var p = panel();
    if (!p) return null;
    if (p.dataset.stepIndex !== undefined && p.querySelector("#candidates .candidate[data-rating]")) {
      return Number(p.dataset.stepIndex);
    }
    var rated = p.querySelectorAll('.step.rated:not([data-candidates-rated="0"])');
    return rated.length ? Number(rated[rated.length - 1].dataset.step) : null;
  }
  function openNote() {
    var form = document.getElementById("note-form");
    if (!form) return false;
    var at = selectedIndex() !== null ? selectedIndex() : lastRatedIndex();
    if (at !== null) form.querySelector("[name=step]").value = String(at + 1);
    var text = form.querySelector("textarea");
    text.scrollIntoView({ block: "nearest" });
    text.focus();
    return true;
  }
  // A saved note comes back alone, added to the list: the box empties and the page's keys act
  // again. A refused one leaves the box as typed, the reason above it.
  document.addEventListener("htmx:afterRequest", function (e) {
    if (!e.detail.successful || e.detail.elt.id !== "note-form") return;
    var text = e.detail.elt.querySelector("textarea");
    text.value = "";
    text.blur();
  });
  document.addEventListener("keydown", function (e) {
    if (!e.target.closest || !e.target.closest("#note-form")) return;
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) {
      e.preventDefault();
      e.target.closest("#note-form").requestSubmit();
    } else if (e.key === "Escape") {
      e.preventDefault();
      e.target.blur();
    }
  });

  function perform(actions) {
    // Several words: the first action the page offers now (Enter: continue, else next).
    return actions.split(" ").some(performOne);
  }
  function performOne(action) {
    var p = panel();
    if (!p) return false;
    if (action === "cand-next") return focusCandidate(candidateFocus === null ? 0 : candidateFocus + 1, true);
    if (action === "cand-prev") return focusCandidate(candidateFocus === null ? 0 : candidateFocus - 1, true);
    if (action === "write") return openWriteBox();
    if (action === "note") return openNote();
    if (action === "select-prev") return selectBy(-1);
    if (action === "select-next") return selectBy(1);
    if (action === "deselect") return selectedIndex() !== null && select(null);
    var el;
    var selected = selectedIndex() !== null && p.querySelector(".step.selected");
    var focused = CANDIDATE_ACTIONS[action] && p.querySelector(".candidate.focused");
    if (selected && STEP_ACTIONS[action]) {
      el = selected.querySelector('[data-key-action="' + action + '"]');
    } else if (focused) {
      el = focused.querySelector('[data-key-action="' + action + '"]');
    } else {
      el = p.querySelector('[data-key-action="' + action + '"]:not([data-scope="step"])');
    }
    if (!el || el.disabled) return false;
    el.click();
    return true;
  }

  document.addEventListener("keydown", function (e) {
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    // The help is modal: keys do nothing behind it (Esc closes it, by the browser).
    if (helpOpen()) {
      if (e.key === "?") { e.preventDefault(); help().close(); }
      return;
    }
    if (e.target.matches && e.target.matches("textarea, select, input[type=text], input[type=number], input[type=password]")) return;
    var key = e.key.length === 1 ? e.key.toLowerCase() : e.key;
    // Enter and Space on a focused top-bar control (the theme toggle, a link) act on it.
    if ((key === "Enter" || key === " ") && e.target.closest && e.target.closest(".topbar")) return;
    var action = KEYS[key];
    if (!action) return;
    if (action === "retry") {
      // A request that did not save first; else the page's own "again" (ask the model again).
      if (window.stepwiseRetry && window.stepwiseRetry()) { e.preventDefault(); return; }
      var again = panel() && panel().querySelector('[data-key-action="retry"]');
      if (!again) return;
    }
    if (action === "help") { e.preventDefault(); openHelp(); return; }
    if (action === "guidelines") {
      var guide = document.getElementById("guidelines-link");
      if (guide) { e.preventDefault(); window.open(guide.href, "stepwise-guidelines"); }
      return;
    }
    if (!panel()) return;
    if (action === "deselect" && selectedIndex() === null && !busy()) return;  // Esc as usual
    e.preventDefault();
    if (busy() && action !== "flag") { pending.push(action); return; }
    perform(action);
  });

  document.addEventListener("click", function (e) {
    var target = e.target.closest ? e.target : e.target.parentElement;
    if (!target) return;
    if (target.closest("[data-open-help]")) { openHelp(); return; }
    if (target.closest("#labeling [data-write-open]")) { openWriteBox(); return; }
    if (target.closest("#labeling [data-write-close]")) { closeWriteBox(); return; }
    var candidate = target.closest("#labeling .candidate");
    if (candidate) focusCandidate(candidates().indexOf(candidate), false);
    var cell = target.closest("#labeling [data-select-step]");
    if (cell) { select(Number(cell.dataset.selectStep)); return; }
    if (target.closest("#labeling [data-select-current]")) select(null);
  });

  // Time on a step, measured in the browser, travels with the request that rates it.
  document.addEventListener("htmx:configRequest", function (e) {
    if (!e.detail.elt.closest || !e.detail.elt.closest("#labeling")) return;
    e.detail.parameters.elapsed_ms = Math.round(performance.now() - shownAt);
  });
  // A poll for candidates still being written is not the labeler's request: keys go on.
  function isPoll(e) { return e.detail.elt && e.detail.elt.hasAttribute && e.detail.elt.hasAttribute("data-poll"); }
  document.addEventListener("htmx:beforeRequest", function (e) {
    if (!fromPanel(e) || isPoll(e)) return;
    inFlight = true;
    // Changing an earlier step's rating leaves the current step's clock running.
    keepStepTime = e.detail.elt.hasAttribute("data-keeps-step-time");
  });
  document.addEventListener("htmx:afterRequest", function (e) {
    // A failed request swaps nothing: stop waiting. Keys pressed meanwhile wait for a retry
    // that is under way; otherwise they were meant for a state that never came: drop them
    // (the failure banner offers the retry).
    if (fromPanel(e) && !isPoll(e) && !e.detail.successful) {
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
      refocusCandidates();
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

  // "Rate again from here": how many ratings it takes back is read from the page when asked,
  // since a rating answered with a fragment leaves the earlier steps' buttons as they were.
  document.addEventListener("htmx:confirm", function (e) {
    var elt = e.detail.elt;
    if (e.defaultPrevented || !elt.matches || !elt.matches('#labeling .step.rated [data-key-action="again"]')) return;
    var from = Number(elt.closest(".step.rated").dataset.step);
    var n = Array.prototype.filter.call(panel().querySelectorAll(".step.rated"), function (el) {
      return Number(el.dataset.step) >= from;
    }).length;
    e.preventDefault();
    var question = "Take back " + n + " rating" + (n > 1 ? "s" : "") + " (step " + (from + 1) +
      (n > 1 ? " to " + (from + n) : "") + ") and rate again from step " + (from + 1) + "?";
    if (window.confirm(question)) e.detail.issueRequest(true);
  });

  // The rating that ends a solution answers with a fragment whose "done" block takes the rate
  // buttons' place: the panel it lands in is submitted now, with no claim left to extend. Set
  // in the swap itself, so the page never shows the block beside an in-progress panel.
  document.addEventListener("htmx:oobAfterSwap", function (e) {
    var done = e.target;
    var p = panel();
    if (!p || !done.matches || !done.matches("#labeling .done[data-status]")) return;
    p.dataset.status = done.dataset.status;
    delete p.dataset.leaseExpires;
    delete p.dataset.extendUrl;
    var warn = document.getElementById("lease-warning");
    if (warn) warn.hidden = true;
  });

  document.addEventListener("htmx:afterSettle", function (e) {
    if (!panel()) return;
    // The notes card settles on its own: the panel, its clock and its keys are untouched.
    if (e.detail.elt && e.detail.elt.closest && e.detail.elt.closest("#notes")) return;
    // A fragment's pieces settle one by one after the panel (its request's target) has: the
    // panel's settle stands for the whole answer.
    if (e.detail.elt && e.detail.elt.hasAttribute && e.detail.elt.hasAttribute("data-oob")) return;
    // Candidates that came while the labeler works (a poll's swap): the clock, the claim and
    // any request under way are as they were; the selection moves on only from a rated one.
    if (e.detail.elt && e.detail.elt.id === "candidates") { refocusCandidates(); return; }
    var fragment = e.detail.xhr && e.detail.xhr.getResponseHeader("HX-Reswap") === "none";
    inFlight = false;
    // A new panel comes with a renewed lease; a fragment renews it only past half its length,
    // so the page goes on extending it while the labeler is active.
    if (!fragment) lastExtend = Date.now();
    else if (selectedIndex() !== null) select(null);  // as a new panel: no step selected
    showLease();
    if (!keepStepTime) shownAt = performance.now();
    keepStepTime = false;
    var current = panel().querySelector(".step.current");
    if (current) current.scrollIntoView({ block: "nearest", behavior: "smooth" });
    refocusCandidates();
    if (e.detail.elt && e.detail.elt.id === "labeling") restoreDraft();
    if (pending.length) perform(pending.shift());
  });
})();
