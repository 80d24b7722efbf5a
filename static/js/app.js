// Math rendering and request-failure handling shared by every page.
(function () {
  "use strict";

  function renderMath(root) {
    if (!window.renderMathInElement) return;
    window.renderMathInElement(root || document.body, {
      delimiters: [
        { left: "$$", right: "$$", display: true },
        { left: "\\[", right: "\\]", display: true },
        { left: "\\(", right: "\\)", display: false },
        { left: "$", right: "$", display: false },
      ],
      throwOnError: false,
      ignoredClasses: ["no-math"],
    });
  }
  window.stepwiseRenderMath = renderMath;

  document.addEventListener("DOMContentLoaded", function () { renderMath(document.body); });
  document.addEventListener("htmx:afterSwap", function (e) { renderMath(e.detail.elt); });

  // A request that failed on the network or the server: say so, keep what the user did.
  var lastFailed = null;
  function showFailure(message, elt) {
    var banner = document.getElementById("net-error");
    lastFailed = elt || null;
    if (!banner) return;
    banner.textContent = message + (lastFailed ? " Press R or click here to retry." : "");
    banner.hidden = false;
  }
  function clearFailure() {
    var banner = document.getElementById("net-error");
    if (banner) banner.hidden = true;
    lastFailed = null;
  }
  window.stepwiseRetry = function () {
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
    e.detail.elt.classList.add("failed");
    showFailure("Not saved: the server could not be reached. Your choice is kept.", e.detail.elt);
  });
  document.addEventListener("htmx:responseError", function (e) {
    var status = e.detail.xhr.status;
    if (status >= 500) {
      e.detail.elt.classList.add("failed");
      showFailure("Not saved: the server answered " + status + ". Your choice is kept.", e.detail.elt);
    }
  });
  document.addEventListener("htmx:afterRequest", function (e) {
    if (e.detail.successful) clearFailure();
  });
})();
