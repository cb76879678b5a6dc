// heaptag html: draws the charts and flame graphs from the embedded data.
// Every figure comes from #heaptag-data (the JSON reports); nothing here
// computes one, it only stacks and formats them.
"use strict";
(function () {
  const D = JSON.parse(document.getElementById("heaptag-data").textContent);
  const COLORS = [
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#bab0ac", "#1f77b4", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#7f7f7f",
  ];
  const LINE_STYLE = {
    "RSS (VmRSS)": { stroke: "#111", dash: [] },
    "VmHWM": { stroke: "#c00", dash: [6, 4] },
    "jemalloc resident": { stroke: "#555", dash: [2, 3] },
  };
  // Axis steps in powers of two, so ticks read 64 MiB, 128 MiB, ...
  const BYTE_INCRS = Array.from({ length: 60 }, (_, k) => 2 ** k);
  // Binary units, as heaptag's text reports print them.
  function fmtBytes(b) {
    if (b == null) return "-";
    const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let v = b, u = 0;
    while (v >= 1024 && u + 1 < units.length) { v /= 1024; u++; }
    return u === 0 ? b + " B" : v.toFixed(1) + " " + units[u];
  }
  function esc(s) {
    return String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
  }
  let by = "stage";
  const charts = []; // per log: { u, log, group, windows, selected }

  function windowsOf(i) {
    const d = D.dups.sources[i];
    const end = D.report.sources[i].source.duration_s;
    if (!d) return [];
    return d.duplicated.map((g, j) => ({
      j, from: g.from_s, until: g.until_s == null ? end : g.until_s, group: g,
    }));
  }

  function build(i) {
    const el = document.getElementById("chart-" + i);
    if (!el) return;
    const ch = D.logs[i].chart;
    const group = ch.groups.find((g) => g.by === by) || { series: [] };
    const n = ch.times_s.length;
    // Cumulative sums, bottom (largest peak) first; drawn top first so
    // each opaque fill covers the one below only where it is lower.
    const cum = [];
    let acc = new Array(n).fill(0);
    for (const s of group.series) {
      acc = acc.map((a, k) => a + s.values[k]);
      cum.push(acc);
    }
    const data = [ch.times_s];
    const series = [{ label: "time" }];
    for (let k = group.series.length - 1; k >= 0; k--) {
      const c = COLORS[k % COLORS.length];
      data.push(cum[k]);
      series.push({ label: group.series[k].key, stroke: c, fill: c, width: 1, points: { show: false } });
    }
    for (const l of ch.lines) {
      const st = LINE_STYLE[l.name] || { stroke: "#000", dash: [8, 2, 2, 2] };
      data.push(l.values);
      series.push({ label: l.name, stroke: st.stroke, dash: st.dash, width: 1.5, spanGaps: true, points: { show: false } });
    }
    const state = charts[i] || { selected: null };
    state.group = group;
    state.windows = windowsOf(i);
    const marks = D.report.sources[i].marks || [];
    const opts = {
      width: Math.max(400, el.clientWidth || 900),
      height: 380,
      series,
      // Live bytes from 0 (a stack needs its base).
      scales: {
        x: { time: false },
        y: { range: (u, min, max) => [0, max > 0 ? max * 1.05 : 1] },
      },
      legend: { show: false },
      cursor: { drag: { x: true, y: false }, points: { show: false } },
      axes: [
        { label: "seconds since the log's start" },
        { size: 80, incrs: BYTE_INCRS, values: (u, vals) => vals.map(fmtBytes) },
      ],
      hooks: {
        draw: [(u) => drawOverlay(u, state, marks)],
        setCursor: [(u) => hover(i, u.cursor.idx)],
      },
    };
    if (state.u) state.u.destroy();
    el.textContent = "";
    state.u = new uPlot(opts, data, el);
    state.u.over.addEventListener("click", (e) => clickWindow(i, state, e));
    wholeRun(i, state);
    charts[i] = state;
    legend(i, group, ch);
  }

  // Marks as labelled rules; duplicate windows shaded.
  function drawOverlay(u, state, marks) {
    const ctx = u.ctx;
    const top = u.bbox.top, h = u.bbox.height;
    ctx.save();
    // The union of the windows, lightly; the selected one darker.
    const spans = state.windows.map((w) => [w.from, w.until]).sort((a, b) => a[0] - b[0]);
    const union = [];
    for (const [a, b] of spans) {
      const last = union[union.length - 1];
      if (last && a <= last[1]) last[1] = Math.max(last[1], b);
      else union.push([a, b]);
    }
    ctx.fillStyle = "rgba(220,0,0,0.10)";
    for (const [a, b] of union) {
      const x0 = u.valToPos(a, "x", true), x1 = u.valToPos(b, "x", true);
      ctx.fillRect(x0, top, Math.max(2, x1 - x0), h);
    }
    const sel = state.windows.find((w) => w.j === state.selected);
    if (sel) {
      const x0 = u.valToPos(sel.from, "x", true), x1 = u.valToPos(sel.until, "x", true);
      ctx.fillStyle = "rgba(220,0,0,0.25)";
      ctx.fillRect(x0, top, Math.max(2, x1 - x0), h);
      ctx.strokeStyle = "#c00";
      ctx.lineWidth = 2;
      ctx.strokeRect(x0, top, Math.max(2, x1 - x0), h);
      ctx.lineWidth = 1;
    }
    ctx.font = (11 * devicePixelRatio) + "px sans-serif";
    ctx.textBaseline = "top";
    for (const [t, label] of marks) {
      const x = Math.round(u.valToPos(t, "x", true)) + 0.5;
      ctx.strokeStyle = "#6a3d9a";
      ctx.setLineDash([4, 3]);
      ctx.beginPath();
      ctx.moveTo(x, top);
      ctx.lineTo(x, top + h);
      ctx.stroke();
      ctx.save();
      // Labels beside their rule at the plot's top, inside it: left of the
      // rule when the label would run past the right edge.
      const w = ctx.measureText(label).width;
      const right = x + 3 + w > u.bbox.left + u.bbox.width;
      ctx.textAlign = right ? "right" : "left";
      ctx.fillStyle = "#6a3d9a";
      ctx.fillText(label, right ? x - 3 : x + 3, top + 3);
      ctx.restore();
    }
    ctx.restore();
  }

  function hover(i, idx) {
    const box = document.getElementById("hover-" + i);
    const st = charts[i];
    if (!box || !st || idx == null) return;
    const ch = D.logs[i].chart;
    let total = 0;
    let rows = "";
    st.group.series.forEach((s, k) => {
      total += s.values[idx];
      rows += `<tr data-key="${esc(s.key)}"><td><span class="swatch" style="background:${COLORS[k % COLORS.length]}"></span>${esc(s.key)}</td><td class="num" data-bytes="${s.values[idx]}">${fmtBytes(s.values[idx])}</td></tr>`;
    });
    let lines = "";
    for (const l of ch.lines) {
      lines += `<tr class="line" data-key="${esc(l.name)}"><td>${esc(l.name)}</td><td class="num" data-bytes="${l.values[idx] == null ? "" : l.values[idx]}">${fmtBytes(l.values[idx])}</td></tr>`;
    }
    const inWin = st.windows.filter((w) => ch.times_s[idx] >= w.from && ch.times_s[idx] <= w.until);
    box.innerHTML =
      `<div class="at" data-time="${ch.times_s[idx]}">at ${ch.times_s[idx].toFixed(3)} s: live ${fmtBytes(total)} by ${by}` +
      (inWin.length ? ` <strong>(${inWin.length} duplicate window${inWin.length > 1 ? "s" : ""})</strong>` : "") +
      `</div><table><tbody>${rows}${lines}</tbody></table>`;
  }

  function legend(i, group, ch) {
    const box = document.getElementById("legend-" + i);
    if (!box) return;
    let html = "";
    group.series.forEach((s, k) => {
      html += `<span class="key" data-key="${esc(s.key)}"><span class="swatch" style="background:${COLORS[k % COLORS.length]}"></span>${esc(s.key)} <small data-bytes="${s.peak_bytes}">peak ${fmtBytes(s.peak_bytes)}</small></span>`;
    });
    for (const l of ch.lines) {
      const st = LINE_STYLE[l.name] || { stroke: "#000" };
      html += `<span class="key line" data-key="${esc(l.name)}"><span class="rule" style="border-color:${st.stroke}"></span>${esc(l.name)} <small data-bytes="${l.peak_bytes}">peak ${fmtBytes(l.peak_bytes)}</small></span>`;
    }
    if ((D.report.sources[i].marks || []).length) html += `<span class="key"><span class="rule mark"></span>marks</span>`;
    if (charts[i].windows.length) html += `<span class="key"><span class="swatch win"></span>duplicate copies alive</span>`;
    box.innerHTML = html;
  }

  function highlightGroup(i, j) {
    document.querySelectorAll("tr.group.sel").forEach((r) => r.classList.remove("sel"));
    const row = document.getElementById(`dup-${i}-${j}`);
    if (row) row.classList.add("sel");
    return row;
  }

  function clickWindow(i, st, e) {
    const t = st.u.posToVal(e.offsetX, "x");
    // The window under the click that wasted the most.
    const hits = st.windows.filter((w) => t >= w.from && t <= w.until);
    if (!hits.length) return;
    const hit = hits.reduce((a, w) => (w.group.wasted_bytes > a.group.wasted_bytes ? w : a));
    st.selected = hit.j;
    st.u.redraw(false);
    const row = highlightGroup(i, hit.j);
    if (row) row.scrollIntoView({ block: "center" });
  }

  function showWindow(i, j) {
    const st = charts[i];
    if (!st || !st.u) return;
    const w = st.windows.find((x) => x.j === j);
    if (!w) return;
    st.selected = j;
    highlightGroup(i, j);
    const pad = Math.max((w.until - w.from) * 0.5, D.logs[i].chart.bucket_s * 4);
    st.u.setScale("x", { min: Math.max(0, w.from - pad), max: w.until + pad });
    document.getElementById("chartbox-" + i).scrollIntoView({ block: "start" });
  }

  // The x axis over the whole log, from its start to its last record.
  function wholeRun(i, st) {
    const t = st.u.data[0];
    st.u.setScale("x", { min: 0, max: Math.max(t[t.length - 1], D.report.sources[i].source.duration_s) });
  }

  function buildAll() {
    D.logs.forEach((_, i) => build(i));
  }

  document.querySelectorAll("#timeline button[data-by]").forEach((btn) => {
    btn.addEventListener("click", () => {
      by = btn.dataset.by;
      document.querySelectorAll("#timeline button[data-by]").forEach((b) => b.classList.toggle("on", b === btn));
      buildAll();
    });
  });
  document.querySelector("#timeline button.reset").addEventListener("click", () => {
    charts.forEach((st, i) => {
      if (!st || !st.u) return;
      st.selected = null;
      wholeRun(i, st);
    });
  });
  document.querySelectorAll("a.show").forEach((a) => {
    a.addEventListener("click", (e) => {
      e.preventDefault();
      showWindow(+a.dataset.log, +a.dataset.group);
    });
  });

  // Flame graphs: each inferno SVG in a frame of its own (its script is
  // written for a document of its own), same-origin through srcdoc.
  function flameDoc(svg) {
    const start = svg.indexOf("<svg");
    const body = (start >= 0 ? svg.slice(start) : svg).replace('onload="init(evt)"', "");
    return (
      "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><style>html,body{margin:0;overflow:hidden}svg{width:100%;display:block}</style>" +
      // inferno keeps its zoom and search in the URL; a srcdoc frame has none.
      "<script>history.replaceState=function(){};<\/script></head><body>" +
      body +
      "<script>init(null);<\/script></body></html>"
    );
  }
  const frames = [];
  document.querySelectorAll("iframe.flame").forEach((f) => {
    const fl = D.logs[+f.dataset.log].flames[+f.dataset.flame];
    if (!fl || !fl.svg) return;
    f.addEventListener("load", () => {
      const doc = f.contentDocument;
      if (!doc) return;
      const fit = () => { f.style.height = doc.documentElement.scrollHeight + "px"; };
      fit();
      setTimeout(fit, 50);
    });
    f.srcdoc = flameDoc(fl.svg);
    frames.push(f);
  });
  const search = document.getElementById("flame-search");
  if (search) {
    search.addEventListener("input", () => {
      const term = search.value;
      const re = term.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
      const found = [];
      for (const f of frames) {
        const w = f.contentWindow;
        if (!w || typeof w.search !== "function") continue;
        w.reset_search();
        w.searching = 0;
        const m = w.document.getElementById("matched");
        if (m) {
          m.classList.add("hide");
          if (m.firstChild) m.firstChild.nodeValue = "";
        }
        if (!term) continue;
        w.search(re);
        found.push(w.searching && m && m.firstChild ? m.firstChild.nodeValue : "Matched: 0%");
      }
      document.getElementById("flame-matched").textContent = term ? found.join(" | ") : "";
    });
  }

  buildAll();
  // For scripts (and the browser test): the data and the charts drawn.
  window.heaptag = { data: D, charts, grouping: () => by };
  let resizeTimer = null;
  window.addEventListener("resize", () => {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(buildAll, 150);
  });
  // How long the page took to draw its charts, ms since navigation began
  // (docs/PERFORMANCE.md reads it with `chromium --headless --dump-dom`).
  document.body.dataset.drawnMs = String(Math.round(performance.now()));
  window.addEventListener("load", () => {
    document.body.dataset.loadedMs = String(Math.round(performance.now()));
  });
  document.body.dataset.ready = "1";
})();
