// mhlo-cost HTML report: sorting, filtering, subtotals, block details, hover text, CSV of the rows shown.
// Every number keeps its exact value in data-v; integers are summed and compared as BigInt.
"use strict";
(function () {
  var INT = /^-?\d+$/;

  function cellValue(tr, col) {
    var td = tr.cells[col];
    return td ? td.getAttribute("data-v") : "";
  }

  function compare(a, b, numeric) {
    if (a === b) return 0;
    if (a === "") return 1;  // missing values last, either way
    if (b === "") return -1;
    if (!numeric) return a.localeCompare(b, "en", {numeric: true});
    if (INT.test(a) && INT.test(b)) {
      var x = BigInt(a), y = BigInt(b);
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    return parseFloat(a) - parseFloat(b);
  }

  function bodyRows(table) {
    return Array.prototype.filter.call(table.tBodies[0].rows, function (r) { return !r.classList.contains("detail"); });
  }

  function closeDetails(table) {
    Array.prototype.slice.call(table.querySelectorAll("tr.detail")).forEach(function (d) { d.remove(); });
    Array.prototype.forEach.call(table.querySelectorAll("tr.open"), function (r) { r.classList.remove("open"); });
  }

  function sortBy(table, th) {
    var col = +th.getAttribute("data-col");
    var numeric = th.getAttribute("data-type") === "num";
    var current = th.getAttribute("aria-sort");
    var dir = current ? (current === "ascending" ? "descending" : "ascending") : (numeric ? "descending" : "ascending");
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (c) { c.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", dir);
    closeDetails(table);
    var sign = dir === "ascending" ? 1 : -1;
    var rows = bodyRows(table).map(function (r, i) { return {r: r, i: i, v: cellValue(r, col)}; });
    rows.sort(function (p, q) {
      if (p.v === "" || q.v === "") return compare(p.v, q.v, numeric) || p.i - q.i;
      return sign * compare(p.v, q.v, numeric) || p.i - q.i;
    });
    var body = table.tBodies[0];
    rows.forEach(function (p) { body.appendChild(p.r); });
  }

  function scaled(total, div, dec) {  // BigInt total / div, rounded half away from zero (as the page's cells)
    var neg = total < 0n, v = neg ? -total : total;
    var scale = 10n ** BigInt(dec), d = BigInt(div);
    var q = (v * scale) / d, r = (v * scale) % d;
    if (2n * r >= d) q += 1n;
    var whole = (q / scale).toLocaleString("en-US");
    var frac = dec > 0 ? "." + (q % scale).toString().padStart(dec, "0") : "";
    return (neg ? "-" : "") + whole + frac;
  }

  function subtotal(table) {
    var shown = table.tFoot && table.tFoot.querySelector("tr.shown");
    if (!shown) return;
    var rows = bodyRows(table), visible = rows.filter(function (r) { return !r.hidden; });
    shown.hidden = visible.length === rows.length;
    var heads = table.tHead.rows[0].cells;
    for (var c = 0; c < heads.length; c++) {
      var th = heads[c], td = shown.cells[c], fam = th.getAttribute("data-fam");
      if (c === 0) { td.textContent = "shown (" + visible.length + ")"; continue; }
      if (th.getAttribute("data-type") !== "num" || fam === "ratio" || fam === "other" || fam === "fixed") {
        td.textContent = ""; continue;
      }
      var vals = visible.map(function (r) { return cellValue(r, c); }).filter(function (v) { return v !== ""; });
      var div = th.getAttribute("data-div"), dec = +th.getAttribute("data-dec");
      if (vals.every(function (v) { return INT.test(v); }) && INT.test(div)) {
        var s = vals.reduce(function (a, v) { return a + BigInt(v); }, 0n);
        td.textContent = div === "1" ? s.toLocaleString("en-US") : scaled(s, div, dec);
        td.setAttribute("data-v", s.toString());
      } else {
        var f = vals.reduce(function (a, v) { return a + parseFloat(v); }, 0);
        td.textContent = (f / parseFloat(div)).toFixed(dec);
        td.setAttribute("data-v", String(f));
      }
    }
  }

  function matcher(text) {
    text = text.trim();
    if (!text) return null;
    var m = /^\/(.*)\/([a-z]*)$/.exec(text);
    if (m) {
      try { var re = new RegExp(m[1], m[2].indexOf("i") < 0 ? m[2] + "i" : m[2]); return function (s) { return re.test(s); }; }
      catch (e) { return function () { return false; }; }
    }
    var low = text.toLowerCase();
    return function (s) { return s.toLowerCase().indexOf(low) >= 0; };
  }

  function rowTexts(table, tr) {  // the text cells of a row: the filter matches any of them
    var heads = table.tHead.rows[0].cells, out = [];
    for (var c = 0; c < heads.length; c++) if (heads[c].getAttribute("data-type") === "text") out.push(cellValue(tr, c));
    return out;
  }

  function applyFilter(table, input) {
    var match = matcher(input.value);
    closeDetails(table);
    var rows = bodyRows(table), n = 0;
    rows.forEach(function (r) {
      r.hidden = match ? !rowTexts(table, r).some(match) : false;
      if (!r.hidden) n++;
    });
    var count = document.querySelector('.count[data-for="' + table.id + '"]');
    var noun = rows.length === 1 ? " row" : " rows";
    if (count) count.textContent = n === rows.length ? rows.length + noun : n + " of " + rows.length + noun + " shown";
    subtotal(table);
  }

  function toggleDetails(table, tr) {
    var next = tr.nextElementSibling;
    var open = tr.classList.contains("open");
    if (next && next.classList.contains("detail")) next.remove();
    tr.classList.toggle("open", !open);
    if (open) return;
    var tpl = document.querySelector('template[data-key="' + CSS.escape(tr.getAttribute("data-key")) + '"]');
    var d = document.createElement("tr"), td = document.createElement("td");
    d.className = "detail";
    td.colSpan = tr.cells.length;
    if (tpl) td.appendChild(tpl.content.cloneNode(true));
    d.appendChild(td);
    tr.after(d);
  }

  function openBlock(key) {
    var table = document.getElementById("blocks");
    if (!table) return;
    var tr = table.querySelector('tbody tr[data-key="' + CSS.escape(key) + '"]');
    if (!tr) return;
    if (tr.hidden) {
      var input = document.querySelector('.filter[data-for="blocks"]');
      input.value = "";
      applyFilter(table, input);
    }
    if (!tr.classList.contains("open")) toggleDetails(table, tr);
    tr.scrollIntoView({block: "center"});
  }

  function csv(table) {
    function q(s) { return /[",\n]/.test(s) ? '"' + s.replace(/"/g, '""') + '"' : s; }
    // A text cell a spreadsheet would evaluate (=, +, -, @, tab, CR first) gets a leading apostrophe (OWASP),
    // as in the CSV of the command line; number cells (class "n") and plain numbers never do.
    function text(td) {
      var v = td.getAttribute("data-v") || "";
      var plain = /^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/.test(v);
      return !td.classList.contains("n") && /^[=+\-@\t\r]/.test(v) && !plain ? "'" + v : v;
    }
    var heads = Array.prototype.map.call(table.tHead.rows[0].cells, function (th) {
      return q(th.querySelector(".name").textContent);
    });
    var lines = [heads.join(",")];
    var rows = bodyRows(table).filter(function (r) { return !r.hidden; }).concat(
      Array.prototype.slice.call(table.tFoot.querySelectorAll("tr.total")));
    rows.forEach(function (r) {
      lines.push(Array.prototype.map.call(r.cells, function (td) { return q(text(td)); }).join(","));
    });
    return lines.join("\n") + "\n";
  }

  function download(table) {
    var a = document.createElement("a");
    a.download = (table.id || "table") + ".csv";
    a.href = "data:text/csv;charset=utf-8," + encodeURIComponent(csv(table));
    document.body.appendChild(a);
    a.click();
    a.remove();
  }

  function showColumn(table, c, on) {
    Array.prototype.forEach.call(table.rows, function (r) {
      if (!r.classList.contains("detail") && r.cells[c]) r.cells[c].hidden = !on;
    });
  }

  function setupColumns(table) {  // the "columns" menu: one checkbox per column
    var box = document.querySelector('details.cols[data-for="' + table.id + '"] > div');
    if (!box) return;
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, c) {
      var label = document.createElement("label"), cb = document.createElement("input");
      cb.type = "checkbox";
      cb.checked = th.getAttribute("data-hide") !== "1";
      cb.addEventListener("change", function () { showColumn(table, c, cb.checked); });
      label.appendChild(cb);
      label.appendChild(document.createTextNode(" " + th.querySelector(".name").textContent));
      box.appendChild(label);
      if (!cb.checked) showColumn(table, c, false);
    });
  }

  function setupTable(table) {
    setupColumns(table);
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th) {
      th.addEventListener("click", function () { sortBy(table, th); });
    });
    table.tBodies[0].addEventListener("click", function (ev) {
      var tr = ev.target.closest("tr.has-details");
      if (tr && !window.getSelection().toString()) toggleDetails(table, tr);
    });
    table.tBodies[0].addEventListener("keydown", function (ev) {
      if (ev.key === "Enter" && ev.target.matches("tr.has-details")) toggleDetails(table, ev.target);
    });
    var input = document.querySelector('.filter[data-for="' + table.id + '"]');
    if (input) input.addEventListener("input", function () { applyFilter(table, input); });
    var button = document.querySelector('.csv[data-for="' + table.id + '"]');
    if (button) button.addEventListener("click", function () { download(table); });
    applyFilter(table, input || {value: ""});
  }

  function setupTips() {
    var tip = document.getElementById("tip");
    document.addEventListener("mouseover", function (ev) {
      var el = ev.target.closest && ev.target.closest("[data-tip]");
      if (!el) { tip.hidden = true; return; }
      tip.textContent = el.getAttribute("data-tip");
      tip.hidden = false;
    });
    document.addEventListener("mousemove", function (ev) {
      if (tip.hidden) return;
      var x = ev.clientX + 14, y = ev.clientY + 14;
      if (x + tip.offsetWidth > window.innerWidth - 8) x = ev.clientX - tip.offsetWidth - 14;
      if (y + tip.offsetHeight > window.innerHeight - 8) y = ev.clientY - tip.offsetHeight - 14;
      tip.style.left = Math.max(4, x) + "px";
      tip.style.top = Math.max(4, y) + "px";
    });
    document.addEventListener("click", function (ev) {
      var el = ev.target.closest && ev.target.closest("svg [data-block]");
      if (el) openBlock(el.getAttribute("data-block"));
    });
  }

  function fromHash() {  // report.html#block=NAME opens that block: a link that can go in a ticket
    var m = /^#block=(.+)$/.exec(window.location.hash);
    if (m) openBlock(decodeURIComponent(m[1]));
  }

  Array.prototype.forEach.call(document.querySelectorAll("table.data"), setupTable);
  setupTips();
  window.addEventListener("hashchange", fromHash);
  fromHash();
  window.mhloCost = {csv: csv, openBlock: openBlock};
})();
