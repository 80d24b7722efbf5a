// Lead dashboard charts: drawn once, fed from the #chart-data JSON that every poll refreshes.
(function () {
  "use strict";
  var charts = {};
  var COLORS = {};

  // The theme's colours (CSS variables, see theme.js): read at build time and on a theme change.
  function readColors() {
    ["pos", "neu", "neg", "accent"].forEach(function (name) { COLORS[name] = window.stepwiseColor(name); });
    COLORS.muted = window.stepwiseColor("chart-muted");
    Chart.defaults.color = window.stepwiseColor("muted");
    Chart.defaults.borderColor = window.stepwiseColor("line");
  }

  function paint() {
    charts.throughput.data.datasets[0].backgroundColor = COLORS.accent;
    charts.throughput.data.datasets[1].borderColor = COLORS.muted;
    charts.ratings.data.datasets[0].backgroundColor = [COLORS.pos, COLORS.neu, COLORS.neg];
    charts.finish.data.datasets[0].backgroundColor = [COLORS.pos, COLORS.neg, COLORS.muted, COLORS.neu];
    charts.finish.data.datasets[0].borderColor = window.stepwiseColor("card");
  }

  function data() {
    var node = document.getElementById("chart-data");
    return node ? JSON.parse(node.textContent) : null;
  }

  function build(d) {
    if (!window.Chart) return;
    Chart.defaults.font.family = getComputedStyle(document.body).fontFamily;
    Chart.defaults.animation = false;
    readColors();
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
      options: { responsive: true, maintainAspectRatio: false, plugins: { legend: { position: "bottom", labels: { boxWidth: 12 } } } },  // beside it, a narrow card clipped the labels
    });
    paint();
    Object.keys(charts).forEach(function (k) { charts[k].update(); });
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
  document.addEventListener("stepwise:theme", function () {
    if (!charts.throughput) return;
    readColors();
    paint();
    Object.keys(charts).forEach(function (k) { charts[k].update(); });
  });
  document.addEventListener("htmx:afterSettle", function (e) { if (e.detail.elt.id === "live" || document.getElementById("live")) update(); });
})();
