/* Sortable tables for tokenwatt's index (no dependencies, nothing fetched).
 * Click a column heading of a table inside `.tw-sortable` to sort its rows; click again to
 * reverse. Cells that start with a number ("4,522.8 tok/s", "+0.17 %") sort as numbers, dates
 * (YYYY-MM-DD) and text as text; empty cells ("—") sort last. */
(function () {
  "use strict";
  var NUMBER = /^[+\-\u2212]?\d[\d,]*(\.\d+)?/;
  var DATE = /^\d{4}-\d{2}-\d{2}/;

  function key(cell) {
    var text = (cell.textContent || "").trim();
    if (text === "" || text === "\u2014") return null;
    if (!DATE.test(text)) {
      var match = NUMBER.exec(text);
      if (match) return parseFloat(match[0].replace(/,/g, "").replace("\u2212", "-"));
    }
    return text.toLowerCase();
  }

  function compare(a, b) {
    if (a === null) return b === null ? 0 : 1;
    if (b === null) return -1;
    if (typeof a === "number" && typeof b === "number") return a - b;
    return String(a).localeCompare(String(b));
  }

  function sortBy(table, column, heading) {
    var body = table.tBodies[0];
    if (!body) return;
    var descending = heading.getAttribute("aria-sort") === "ascending";
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (r1, r2) {
      var order = compare(key(r1.cells[column]), key(r2.cells[column]));
      return descending ? -order : order;
    });
    rows.forEach(function (row) { body.appendChild(row); });
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th) {
      th.removeAttribute("aria-sort");
    });
    heading.setAttribute("aria-sort", descending ? "descending" : "ascending");
  }

  function init() {
    document.querySelectorAll(".tw-sortable table").forEach(function (table) {
      if (!table.tHead || table.dataset.twSortable) return;
      table.dataset.twSortable = "1";
      Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, column) {
        th.setAttribute("title", "Sort by this column");
        th.addEventListener("click", function () { sortBy(table, column, th); });
      });
    });
  }

  if (window.document$ && typeof window.document$.subscribe === "function") {
    window.document$.subscribe(init);
  } else if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", init);
  } else {
    init();
  }
})();
