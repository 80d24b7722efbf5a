// Adjudication by keyboard: 1 / 0 / - set the focused step's final rating, arrows move, Enter saves.
// Only the step the lead sets changes (a -1 also clears the steps after it, which it ends);
// a step the lead skipped stays unset, and saving is blocked until it is set.
(function () {
  "use strict";
  var rows = function () { return Array.prototype.slice.call(document.querySelectorAll(".adj-step")); };
  var selectOf = function (row) { return row.querySelector("select"); };
  var focused = 0;

  function focus(i) {
    var all = rows();
    if (!all.length) return;
    focused = Math.max(0, Math.min(i, all.length - 1));
    all.forEach(function (r, j) { r.classList.toggle("focused", j === focused); });
    all[focused].scrollIntoView({ block: "nearest" });
  }

  // A -1 ends the solution: the steps after it get no final rating.
  function clearAfter(i) {
    rows().forEach(function (r, j) { if (j > i) selectOf(r).value = ""; });
  }

  function set(value) {
    selectOf(rows()[focused]).value = value;
    if (value === "-1") clearAfter(focused);
    else focus(focused + 1);
  }

  // The first step that needs the lead's decision and has none: every step up to the first -1
  // (or every step) needs one. -1 when none is missing.
  function firstUnset() {
    var all = rows();
    for (var j = 0; j < all.length; j++) {
      var value = selectOf(all[j]).value;
      if (value === "") return j;
      if (value === "-1") return -1;
    }
    return -1;
  }

  function showError(text) {
    var banner = document.getElementById("adjudication-error");
    banner.textContent = text;
    banner.hidden = false;
  }

  document.addEventListener("DOMContentLoaded", function () {
    var first = rows().findIndex(function (r) { return r.classList.contains("disagree"); });
    focus(first < 0 ? 0 : first);
    rows().forEach(function (r, j) {
      r.addEventListener("click", function () { focus(j); });
      selectOf(r).addEventListener("change", function () { if (this.value === "-1") clearAfter(j); });
    });
    document.getElementById("adjudication-form").addEventListener("submit", function (e) {
      var missing = firstUnset();
      if (missing < 0) return;
      e.preventDefault();
      // The same sentence the server answers with when a save lacks a step's decision.
      showError("Step " + (missing + 1) + " has no final rating: set it (1, 0 or -) before saving, " +
        "or end the solution earlier with a -1.");
      focus(missing);
    });
  });
  document.addEventListener("keydown", function (e) {
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    if (e.target.matches("input[type=text], textarea")) return;
    var map = { "1": "1", "+": "1", "0": "0", "-": "-1" };
    if (map[e.key] !== undefined) { e.preventDefault(); set(map[e.key]); }
    else if (e.key === "ArrowDown" || e.key === "j") { e.preventDefault(); focus(focused + 1); }
    else if (e.key === "ArrowUp" || e.key === "k") { e.preventDefault(); focus(focused - 1); }
    else if (e.key === "Enter" && !e.target.matches("button, a")) { e.preventDefault(); document.getElementById("adjudication-form").requestSubmit(); }
  });
})();
