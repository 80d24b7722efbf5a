// Math rendering and request-failure handling shared by every page.
(function () {
  "use strict";

  // KaTeX's auto-render takes an escaped dollar ("costs \$5", common in MATH problems) for an
  // opening delimiter. It hides behind a private-use character while delimiters are found, and
  // comes back as "\$" inside math (KaTeX's dollar sign) and as "$" in the text.
  var DOLLAR = "\uE000";
  function eachText(root, change) {
    var walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT, {
      acceptNode: function (node) {
        var parent = node.parentElement;
        return parent && parent.closest("script, style, textarea, pre, code, .no-math, .katex")
          ? NodeFilter.FILTER_REJECT : NodeFilter.FILTER_ACCEPT;
      },
    });
    var nodes = [];
    while (walker.nextNode()) nodes.push(walker.currentNode);
    nodes.forEach(function (node) {
      var text = change(node.nodeValue);
      if (text !== node.nodeValue) node.nodeValue = text;
    });
  }

  var DELIMITERS = [
    { left: "$$", right: "$$", display: true },
    { left: "\\[", right: "\\]", display: true },
    { left: "\\(", right: "\\)", display: false },
    { left: "$", right: "$", display: false },
  ];
  // One-line titles (a problem in a table row, a sentence): display math set inline there.
  var INLINE_DELIMITERS = DELIMITERS.map(function (d) {
    return { left: d.left, right: d.right, display: false };
  });

  function render(root, delimiters, ignored) {
    window.renderMathInElement(root, {
      preProcess: function (math) { return math.split(DOLLAR).join("\\$"); },
      delimiters: delimiters,
      throwOnError: false,
      ignoredClasses: ["no-math"].concat(ignored),
    });
  }

  function renderMath(root) {
    if (!window.renderMathInElement) return;
    root = root || document.body;
    eachText(root, function (text) { return text.split("\\$").join(DOLLAR); });
    var lines = Array.prototype.slice.call(root.querySelectorAll(".math-line"));
    if (root.matches && root.matches(".math-line")) lines.push(root);
    lines.forEach(function (line) { render(line, INLINE_DELIMITERS, []); });
    if (!(root.matches && root.matches(".math-line"))) render(root, DELIMITERS, ["math-line"]);
    eachText(root, function (text) { return text.split(DOLLAR).join("$"); });
    focusableWhenScrolling(root);
  }

  // Math wider than its box scrolls sideways; a keyboard user reaches it with Tab (WCAG 2.1.1).
  function focusableWhenScrolling(root) {
    var boxes = Array.prototype.slice.call(root.querySelectorAll(".step-text, .katex-display"));
    if (root.matches && root.matches(".step-text")) boxes.push(root);
    boxes.forEach(function (box) {
      if (box.scrollWidth > box.clientWidth) box.tabIndex = 0;
      else if (box.getAttribute("tabindex") === "0") box.removeAttribute("tabindex");
    });
  }
  window.stepwiseRenderMath = renderMath;

  document.addEventListener("DOMContentLoaded", function () { renderMath(document.body); });
  document.addEventListener("htmx:afterSwap", function (e) { renderMath(e.detail.elt); });

  // A request that failed on the network or the server: say so, keep what the user did.
  // Buttons marked data-retry="auto" send requests the server treats as idempotent (a rating,
  // a finish: sent twice, saved once), so they are retried by themselves, with backoff, through
  // a database or web-worker restart; the labeler is told, and asked to retry only when the
  // attempts run out. Other requests (undo) are retried only by the user.
  // About a minute in all: a database restart or a web worker respawn fits in it.
  var RETRY_DELAYS_MS = window.STEPWISE_RETRY_DELAYS_MS || [500, 1000, 2000, 4000, 8000, 15000, 30000];
  var lastFailed = null;
  var retry = { elt: null, attempt: 0, timer: null };

  function banner(message) {
    var el = document.getElementById("net-error");
    if (!el) return;
    el.textContent = message;
    el.hidden = false;
  }
  function showFailure(message, elt) {
    lastFailed = elt || null;
    banner(message + (lastFailed ? " Press R or click here to retry." : ""));
  }
  function clearFailure() {
    var el = document.getElementById("net-error");
    if (el) el.hidden = true;
    lastFailed = null;
  }
  function stopRetrying() {
    if (retry.timer) clearTimeout(retry.timer);
    retry = { elt: null, attempt: 0, timer: null };
    delete document.documentElement.dataset.retrying;
  }
  // True while failed work waits to be sent again (labeling.js holds keys meanwhile).
  window.stepwiseRetrying = function () { return retry.elt !== null; };

  function retryByItself(elt, why) {
    if (!elt.matches || !elt.matches('[data-retry="auto"]')) return false;
    if (retry.elt !== elt) { stopRetrying(); retry.elt = elt; }
    if (retry.attempt >= RETRY_DELAYS_MS.length) {
      stopRetrying();
      document.dispatchEvent(new CustomEvent("stepwise:retryGaveUp"));
      return false;
    }
    var delay = RETRY_DELAYS_MS[retry.attempt++];
    document.documentElement.dataset.retrying = String(retry.attempt);  // tests read it
    banner("Not saved yet: " + why + " Trying again in " + Math.ceil(delay / 1000) + " s (attempt " +
      retry.attempt + " of " + RETRY_DELAYS_MS.length + "); press R to try now. Your choice is kept.");
    retry.timer = setTimeout(sendAgain, delay);
    return true;
  }
  function sendAgain() {
    if (retry.timer) clearTimeout(retry.timer);
    retry.timer = null;
    if (!document.body.contains(retry.elt)) { stopRetrying(); return; }
    htmx.trigger(retry.elt, "click");
  }
  // A retry does not ask again what the user already confirmed (give up, bad problem).
  document.addEventListener("htmx:confirm", function (e) {
    if (retry.elt && e.detail.elt === retry.elt) { e.preventDefault(); e.detail.issueRequest(true); }
  });

  window.stepwiseRetry = function () {
    if (retry.timer) { sendAgain(); return true; }
    if (!lastFailed || !document.body.contains(lastFailed)) return false;
    var elt = lastFailed;
    clearFailure();
    elt.classList.remove("failed");
    htmx.trigger(elt, "click");
    return true;
  };
  document.addEventListener("click", function (e) {
    if (e.target && e.target.id === "net-error") window.stepwiseRetry();
  });
  document.addEventListener("htmx:sendError", function (e) {
    if (retryByItself(e.detail.elt, "the server could not be reached.")) return;
    e.detail.elt.classList.add("failed");
    showFailure("Not saved: the server could not be reached. Your choice is kept.", e.detail.elt);
  });
  document.addEventListener("htmx:responseError", function (e) {
    var status = e.detail.xhr.status;
    if (status < 500) return;
    if (retryByItself(e.detail.elt, "the server answered " + status + ".")) return;
    e.detail.elt.classList.add("failed");
    showFailure("Not saved: the server answered " + status + ". Your choice is kept.", e.detail.elt);
  });
  document.addEventListener("htmx:afterRequest", function (e) {
    // Any answer but a 5xx ends the retries (a 409 says the page was out of date: it is shown).
    var status = e.detail.xhr ? e.detail.xhr.status : 0;
    if (retry.elt && e.detail.elt === retry.elt && status > 0 && status < 500) stopRetrying();
    if (e.detail.successful) clearFailure();
  });
})();
