// Lead dashboard charts: drawn once, fed from the #chart-data JSON that every poll refreshes.
(function () {
  "use strict";
  var charts = {};
  var COLORS = { pos: "#1f8a4c", neu: "#b08a2e", neg: "#c0392b", accent: "#3451b2", muted: "#9aa3b2" };

  function data() {
    var node = document.getElementById("chart-data");
    return node ? JSON.parse(node.textContent) : null;
  }

  function build(d) {
    if (!window.Chart) return;
    Chart.defaults.font.family = getComputedStyle(document.body).fontFamily;
    Chart.defaults.animation = false;
    charts.throughput = new Chart(document.getElementById("chart-throughput"), {
      type: "bar",
      data: {
        labels: d.hours.map(function (h) { return h.t; }),
        datasets: [
          { label: "labelings", data: d.hours.map(function (h) { return h.labelings; }), backgroundColor: COLORS.accent, yAxisID: "y" },
          { label: "steps rated", type: "line", data: d.hours.map(function (h) { return h.steps; }), borderColor: COLORS.muted, pointRadius: 0, yAxisID: "y1" },
        ],
      },
      options: { responsive: true, maintainAspectRatio: false, scales: { y: { beginAtZero: true, title: { display: true, text: "labelings / hour" } }, y1: { beginAtZero: true, position: "right", grid: { drawOnChartArea: false }, title: { display: true, text: "steps / hour" } } } },
    });
    charts.ratings = new Chart(document.getElementById("chart-ratings"), {
      type: "bar",
      data: { labels: ["+1", "0", "−1"], datasets: [{ label: "steps", data: d.ratings, backgroundColor: [COLORS.pos, COLORS.neu, COLORS.neg] }] },
      options: { responsive: true, maintainAspectRatio: false, plugins: { legend: { display: false } }, scales: { y: { beginAtZero: true } } },
    });
    charts.finish = new Chart(document.getElementById("chart-finish"), {
      type: "doughnut",
      data: { labels: ["reached the end", "found an error", "gave up", "bad problem"], datasets: [{ data: d.finish, backgroundColor: [COLORS.pos, COLORS.neg, COLORS.muted, COLORS.neu] }] },
      options: { responsive: true, maintainAspectRatio: false, plugins: { legend: { position: "right" } } },
    });
  }

  function update() {
    var d = data();
    if (!d) return;
    if (!charts.throughput) { build(d); return; }
    charts.throughput.data.labels = d.hours.map(function (h) { return h.t; });
    charts.throughput.data.datasets[0].data = d.hours.map(function (h) { return h.labelings; });
    charts.throughput.data.datasets[1].data = d.hours.map(function (h) { return h.steps; });
    charts.ratings.data.datasets[0].data = d.ratings;
    charts.finish.data.datasets[0].data = d.finish;
    Object.keys(charts).forEach(function (k) { charts[k].update(); });
  }

  document.addEventListener("DOMContentLoaded", update);
  document.addEventListener("htmx:afterSettle", function (e) { if (e.detail.elt.id === "live" || document.getElementById("live")) update(); });
})();
