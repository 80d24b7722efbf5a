// Training run charts, fed from the #chart-data JSON that every poll of #progress refreshes:
// the loss curve (its canvas is hx-preserve'd, so the chart is updated, not rebuilt) and, once
// the run is evaluated, the reliability of P(-1) per bin against the diagonal, and best-of-N
// accuracy against N (three lines) once `evaluate_prm --best-of-n` has measured the run's model.
(function () {
  "use strict";
  var charts = {};
  var COLORS = {};

  // The theme's colours (CSS variables, see theme.js): read at build time and on a theme change.
  function readColors() {
    COLORS.accent = window.stepwiseColor("accent");
    COLORS.neg = window.stepwiseColor("neg");
    COLORS.muted = window.stepwiseColor("chart-muted");
    COLORS.pos = window.stepwiseColor("pos");
    Chart.defaults.color = window.stepwiseColor("muted");
    Chart.defaults.borderColor = window.stepwiseColor("line");
  }

  function paint() {
    if (charts.loss) {
      var loss = charts.loss.data.datasets[0];
      loss.borderColor = loss.backgroundColor = COLORS.accent;
      charts.loss.update();
    }
    if (charts.reliability) {
      var sets = charts.reliability.data.datasets;
      sets[0].borderColor = COLORS.muted;
      sets[1].borderColor = sets[1].backgroundColor = COLORS.neg;
      charts.reliability.update();
    }
    if (charts.bestOfN) {
      bestOfNColors().forEach(function (color, i) {
        var set = charts.bestOfN.data.datasets[i];
        set.borderColor = set.backgroundColor = color;
      });
      charts.bestOfN.update();
    }
  }

  // PRM, last step, majority vote.
  function bestOfNColors() { return [COLORS.accent, COLORS.pos, COLORS.muted]; }

  function data() {
    var node = document.getElementById("chart-data");
    return node ? JSON.parse(node.textContent) : null;
  }

  function lossPoints(d) {
    return d.loss.map(function (p) { return { x: p[0], y: p[1] }; });
  }

  function buildLoss(canvas, d) {
    return new Chart(canvas, {
      type: "line",
      data: { datasets: [{ label: "loss", data: lossPoints(d), borderColor: COLORS.accent, backgroundColor: COLORS.accent,
                           borderWidth: 2, pointRadius: d.loss.length > 60 ? 0 : 2, tension: 0 }] },
      options: {
        responsive: true, maintainAspectRatio: false, parsing: false,
        plugins: { legend: { display: false } },
        scales: { x: { type: "linear", title: { display: true, text: "optimizer step" }, ticks: { precision: 0 } },
                  y: { title: { display: true, text: "training loss" } } },
      },
    });
  }

  function buildReliability(canvas, d) {
    var bins = d.reliability.map(function (b) { return { x: b.mean_predicted, y: b.observed, count: b.count }; });
    return new Chart(canvas, {
      type: "scatter",
      data: { datasets: [
        { label: "perfect calibration", data: [{ x: 0, y: 0 }, { x: 1, y: 1 }], showLine: true, borderColor: COLORS.muted,
          borderDash: [5, 4], pointRadius: 0, borderWidth: 1 },
        { label: "observed share of −1", data: bins, showLine: true, borderColor: COLORS.neg, backgroundColor: COLORS.neg,
          pointRadius: 4 },
      ] },
      options: {
        responsive: true, maintainAspectRatio: false,
        plugins: { tooltip: { callbacks: { label: function (c) {
          var p = c.raw; return p.count === undefined ? "" : "predicted " + p.x.toFixed(2) + ", observed " + p.y.toFixed(2) + " (" + p.count + " steps)";
        } } } },
        scales: { x: { min: 0, max: 1, title: { display: true, text: "predicted P(−1)" } },
                  y: { min: 0, max: 1, title: { display: true, text: "observed share of −1 steps" } } },
      },
    });
  }

  function buildBestOfN(canvas, d) {
    var colors = bestOfNColors();
    var lines = [["prm", "PRM (product)"], ["last", "last step"], ["majority", "majority vote"]];
    return new Chart(canvas, {
      type: "line",
      data: {
        labels: d.best_of_n.map(function (row) { return String(row.n); }),
        datasets: lines.map(function (line, i) {
          return { label: line[1], data: d.best_of_n.map(function (row) { return row[line[0]]; }),
                   borderColor: colors[i], backgroundColor: colors[i], borderWidth: 2, pointRadius: 3,
                   borderDash: i === 2 ? [5, 4] : [], tension: 0 };
        }),
      },
      options: {
        responsive: true, maintainAspectRatio: false,
        scales: { x: { title: { display: true, text: "N (solutions sampled per problem)" } },
                  y: { min: 0, max: 1, title: { display: true, text: "accuracy" } } },
      },
    });
  }

  function update() {
    var d = data();
    if (!d || !window.Chart) return;
    Chart.defaults.font.family = getComputedStyle(document.body).fontFamily;
    Chart.defaults.animation = false;
    readColors();
    var loss = document.getElementById("chart-loss");
    if (loss) {
      if (!charts.loss || charts.loss.canvas !== loss) {
        if (charts.loss) charts.loss.destroy();
        charts.loss = buildLoss(loss, d);
      } else {
        charts.loss.data.datasets[0].data = lossPoints(d);
        charts.loss.data.datasets[0].pointRadius = d.loss.length > 60 ? 0 : 2;
        charts.loss.update();
      }
    }
    // The evaluation card arrives with the last poll: a new canvas, drawn once.
    var reliability = document.getElementById("chart-reliability");
    if (reliability && (!charts.reliability || charts.reliability.canvas !== reliability)) {
      if (charts.reliability) charts.reliability.destroy();
      charts.reliability = buildReliability(reliability, d);
    }
    var bestOfN = document.getElementById("chart-best-of-n");
    if (bestOfN && d.best_of_n && (!charts.bestOfN || charts.bestOfN.canvas !== bestOfN)) {
      if (charts.bestOfN) charts.bestOfN.destroy();
      charts.bestOfN = buildBestOfN(bestOfN, d);
    }
  }

  document.addEventListener("DOMContentLoaded", update);
  document.addEventListener("stepwise:theme", function () {
    if (!window.Chart) return;
    readColors();
    paint();
  });
  document.addEventListener("htmx:afterSettle", function (e) { if (document.getElementById("progress")) update(); });
})();
