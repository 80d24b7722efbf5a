// The item browser by keyboard: / puts the cursor in the search, J and K move through the
// rows (focusing each row's link, so Enter opens it), Esc leaves a filter for the rows.
(function () {
  "use strict";

  function rowLinks() {
    return Array.prototype.slice.call(document.querySelectorAll("#item-table .item-link"));
  }
  function move(offset) {
    var links = rowLinks();
    if (!links.length) return;
    var at = links.indexOf(document.activeElement);
    var next = at < 0 ? (offset > 0 ? 0 : links.length - 1) : Math.max(0, Math.min(links.length - 1, at + offset));
    links[next].focus();
    links[next].closest("tr").scrollIntoView({ block: "nearest" });
  }

  document.addEventListener("keydown", function (e) {
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    var inField = e.target.matches && e.target.matches("input, select, textarea");
    if (inField) {
      if (e.key === "Escape") { e.target.blur(); move(1); }
      return;
    }
    if (e.key === "/") { e.preventDefault(); document.getElementById("id_q").focus(); }
    else if (e.key === "j") { e.preventDefault(); move(1); }
    else if (e.key === "k") { e.preventDefault(); move(-1); }
  });
})();
