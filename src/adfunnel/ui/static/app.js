// adfunnel dashboard: the pacing chart (uPlot) and the JSON editors' live check.
(function () {
  "use strict";

  function drawPacingChart() {
    var holder = document.getElementById("pacing-chart");
    var source = document.getElementById("pacing-data");
    if (!holder || !source || typeof uPlot === "undefined") return;
    var d = JSON.parse(source.textContent);
    var units = function (v) { return v == null ? null : v / 1e6; };
    var data = [d.hours, d.spend_micros.map(units), d.target_micros.map(units), d.p];
    var opts = {
      width: Math.max(320, holder.clientWidth), height: 280,
      scales: { x: { time: false, range: [0, 24] }, money: { auto: true }, p: { range: [0, 1.05] } },
      axes: [
        { label: "local hour", values: function (u, v) { return v.map(function (h) { return h + ":00"; }); } },
        { scale: "money", label: "cumulative spend", values: function (u, v) { return v.map(function (x) { return x.toFixed(2); }); } },
        { scale: "p", side: 1, label: "p", grid: { show: false } }
      ],
      series: [
        { label: "hour", value: function (u, v) { return v == null ? "" : v.toFixed(2); } },
        { label: "spend", scale: "money", stroke: "#2563eb", width: 2.5, spanGaps: true, points: { show: true, size: 5 } },
        { label: "target", scale: "money", stroke: "#9ca3af", width: 2, dash: [6, 4] },
        { label: "p", scale: "p", stroke: "#ea580c", width: 1.5, paths: uPlot.paths.stepped({ align: 1 }) }
      ]
    };
    holder.innerHTML = "";
    var chart = new uPlot(opts, data, holder);
    holder.dataset.rendered = "true";
    holder.dataset.points = String(d.spend_micros.filter(function (v) { return v != null; }).length);
    window.addEventListener("resize", function () { chart.setSize({ width: Math.max(320, holder.clientWidth), height: 280 }); });
  }

  function checkJson(area) {
    var problem = area.parentNode.querySelector(".json-problem");
    if (!problem) return;
    var text = area.value.trim();
    if (!text) { problem.hidden = true; return; }
    try { JSON.parse(text); problem.hidden = true; area.classList.remove("invalid"); }
    catch (e) { problem.textContent = "not valid JSON: " + e.message; problem.hidden = false; area.classList.add("invalid"); }
  }

  function wireEditors(root) {
    root.querySelectorAll("textarea[data-json-editor]").forEach(function (area) {
      area.addEventListener("input", function () { checkJson(area); });
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    drawPacingChart();
    wireEditors(document);
    // htmx swaps a form's fragment in after a refused write: wire its editor again
    document.body.addEventListener("htmx:afterSwap", function (e) { wireEditors(e.target.parentNode || document); });
  });
})();
