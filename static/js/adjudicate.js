// Adjudication by keyboard: 1 / 0 / - set the focused step's final rating, arrows move, Enter saves.
(function () {
  "use strict";
  var rows = function () { return Array.prototype.slice.call(document.querySelectorAll(".adj-step")); };
  var focused = 0;

  function focus(i) {
    var all = rows();
    if (!all.length) return;
    focused = Math.max(0, Math.min(i, all.length - 1));
    all.forEach(function (r, j) { r.classList.toggle("focused", j === focused); });
    all[focused].scrollIntoView({ block: "nearest" });
  }

  function set(value) {
    var all = rows();
    var select = all[focused].querySelector("select");
    select.value = value;
    // A -1 ends the solution: later steps get no final rating.
    all.forEach(function (r, j) {
      var s = r.querySelector("select");
      if (j > focused && value === "-1") s.value = "";
      if (j < focused && s.value === "") s.value = "1";
    });
    if (value !== "-1") focus(focused + 1);
  }

  document.addEventListener("DOMContentLoaded", function () {
    var first = rows().findIndex(function (r) { return r.classList.contains("disagree"); });
    focus(first < 0 ? 0 : first);
    rows().forEach(function (r, j) { r.addEventListener("click", function () { focus(j); }); });
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
