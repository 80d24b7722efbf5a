// Queue page: Enter starts the next solution (when focus is not in a control).
document.addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.target.matches("input, textarea, select, button, a")) {
    const start = document.getElementById("start");
    if (start) { e.preventDefault(); start.click(); }
  }
});
