// Draws each <figure class="chart line" data-chart="{...}"> of a gpuwatch page with uPlot
// (uPlot.iife.min.js, vendored beside this file). The server writes the data as JSON
// (gpuwatch/web/charts.py): x in epoch seconds, one value array per series (null: no data),
// the unit of the y axis, its maximum, the window's start and end. Times are UTC.
(function () {
  "use strict";
  var units = {
    pct: function (v) { return v == null ? "" : Math.round(100 * v) + "%"; },
    count: function (v) { return v == null ? "" : (Math.abs(v) >= 100 ? v.toFixed(0) : String(+v.toPrecision(3))); },
    bytes_per_s: function (v) {
      if (v == null) return "";
      var steps = [[1e9, "GB/s"], [1e6, "MB/s"], [1e3, "kB/s"]];
      for (var i = 0; i < steps.length; i++) {
        if (Math.abs(v) >= steps[i][0]) return +(v / steps[i][0]).toPrecision(3) + " " + steps[i][1];
      }
      return Math.round(v) + " B/s";
    }
  };

  function pad(n) { return (n < 10 ? "0" : "") + n; }

  // x tick labels in UTC, 24-hour: dates ("12-06") over more than two days, else "14:05"
  function timeLabels(span) {
    return function (u, splits) {
      return splits.map(function (ts) {
        var d = new Date(ts * 1000);
        return span > 2 * 86400 ? pad(d.getUTCMonth() + 1) + "-" + pad(d.getUTCDate())
                                : pad(d.getUTCHours()) + ":" + pad(d.getUTCMinutes());
      });
    };
  }

  function draw(figure) {
    var spec = JSON.parse(figure.getAttribute("data-chart"));
    var fmt = units[spec.unit] || units.count;
    var data = [spec.x].concat(spec.series.map(function (s) { return s.values; }));
    var yRange = function (u, min, max) {
      if (spec.y_max != null) return [0, spec.y_max];
      return [0, max > 0 ? max * 1.1 : 1];
    };
    var opts = {
      width: spec.width,
      height: spec.height,
      tzDate: function (ts) { return uPlot.tzDate(new Date(ts * 1000), "Etc/UTC"); },
      scales: { x: { time: true, range: [spec.start, spec.end] }, y: { range: yRange } },
      series: [{ label: "UTC", value: function (u, ts) { return ts == null ? "--" : timeLabels(0)(u, [ts])[0]; } }].concat(spec.series.map(function (s) {
        return { label: s.label, stroke: s.colour, width: 2, spanGaps: false, value: function (u, v) { return fmt(v); } };
      })),
      axes: [
        { values: timeLabels(spec.end - spec.start) },
        { size: 60, values: function (u, splits) { return splits.map(fmt); } }
      ],
      cursor: { drag: { x: true, y: false } }
    };
    new uPlot(opts, data, figure.querySelector(".plot"));
    figure.setAttribute("data-drawn", "1");
  }

  var figures = document.querySelectorAll("figure.chart[data-chart]");
  for (var i = 0; i < figures.length; i++) draw(figures[i]);
})();
