// Colour theme: auto (follows the system), light or dark, kept in localStorage.
// Loaded in <head> without defer, so the saved theme is on <html> before the first paint
// (the CSP forbids an inline script for this). Pages with charts listen for "stepwise:theme".
(function () {
  "use strict";
  var KEY = "stepwise-theme";
  var STATES = ["auto", "light", "dark"];
  var root = document.documentElement;
  var systemDark = window.matchMedia ? window.matchMedia("(prefers-color-scheme: dark)") : null;

  function saved() {
    try {
      var value = localStorage.getItem(KEY);
      return STATES.indexOf(value) >= 0 ? value : "auto";
    } catch (e) {  // storage disabled: the system decides
      return "auto";
    }
  }

  function label(button, state) {
    var next = STATES[(STATES.indexOf(state) + 1) % STATES.length];
    button.textContent = "Theme: " + state;
    button.title = (state === "auto" ? "Follows your system's setting." : "Always " + state + ".") +
      " Click for " + next + ".";
    button.dataset.state = state;
  }

  function apply(state) {
    root.dataset.theme = state;
    var button = document.getElementById("theme-toggle");
    if (button) label(button, state);
    document.dispatchEvent(new CustomEvent("stepwise:theme", { detail: { state: state } }));
  }

  // A colour of the current theme, from the CSS variables (charts draw with these).
  window.stepwiseColor = function (name) {
    return getComputedStyle(root).getPropertyValue("--" + name).trim();
  };

  apply(saved());
  if (systemDark && systemDark.addEventListener) {
    systemDark.addEventListener("change", function () { if (saved() === "auto") apply("auto"); });
  }
  window.addEventListener("storage", function (e) { if (e.key === KEY) apply(saved()); });  // other tabs

  document.addEventListener("DOMContentLoaded", function () {
    var button = document.getElementById("theme-toggle");
    if (!button) return;
    label(button, root.dataset.theme);
    button.addEventListener("click", function () {
      var state = STATES[(STATES.indexOf(root.dataset.theme) + 1) % STATES.length];
      try { localStorage.setItem(KEY, state); } catch (e) { /* this page only */ }
      apply(state);
    });
  });
})();
