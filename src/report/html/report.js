// mcptape report: renders the embedded JSON (#mcptape-data) into a timeline, a virtualised
// list and a statistics table. Tape content is untrusted: it only ever reaches the page as
// text nodes (textContent, createTextNode), never as markup.
"use strict";
(function () {
  const t0 = performance.now();
  const D = JSON.parse(document.getElementById("mcptape-data").textContent);
  const items = D.items;
  const ROW = 24; // px, the height of a closed row
  const $ = (id) => document.getElementById(id);

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function ms(us) {
    if (us === null || us === undefined) return "";
    if (us >= 10e6) return (us / 1e6).toFixed(1) + " s";
    if (us >= 1e6) return (us / 1e6).toFixed(2) + " s";
    return (us / 1000).toFixed(us < 10000 ? 2 : 1) + " ms";
  }
  function bytes(n) {
    if (n < 1024) return n + " B";
    if (n < 1048576) return (n / 1024).toFixed(1) + " KiB";
    return (n / 1048576).toFixed(1) + " MiB";
  }
  function what(it) {
    return it.g ? it.m + " " + it.g : it.m;
  }

  // --- header ---------------------------------------------------------------------------------
  $("h-tape").textContent = D.tape;
  const meta = $("h-meta");
  const counts = { x: 0, s: 0, n: 0, m: 0, r: 0, e: 0 };
  for (const it of items) {
    counts[it.k]++;
    if (it.e === 1) counts.e++;
  }
  const metaBits = [
    "recorded " + D.created,
    "by " + D.tool,
    "length " + ms(D.end_us),
    counts.x + " requests",
    counts.e + " errors",
    counts.n + " notifications",
  ];
  if (counts.s) metaBits.push(counts.s + " server requests");
  // Code Assist's setup calls (Gemini CLI signed in with Google) are taped beside the model
  // calls but are not model calls: counted apart.
  const setup = D.model_setup || 0;
  if (counts.m - setup) metaBits.push(counts.m - setup + " model calls");
  if (setup) metaBits.push(setup + " Code Assist setup calls");
  for (const b of metaBits) meta.appendChild(el("span", "", b));
  const lanesEl = $("h-lanes");
  D.lanes.forEach((l) => lanesEl.appendChild(el("div", "", l.label + " (" + l.transport + "): " + l.desc)));
  for (const w of D.warnings) lanesEl.appendChild(el("div", "warn", "warning: " + w));
  if (D.drift) {
    const s = $("h-drift");
    s.appendChild(el("div", "", D.drift.title));
    if (D.drift.only_other.length) {
      s.appendChild(el("div", "", "calls only on the other side:"));
      const ul = el("ul");
      D.drift.only_other.forEach((o) => ul.appendChild(el("li", "", o)));
      s.appendChild(ul);
    }
  }

  // --- slow threshold: the p95 of every answered call ------------------------------------------
  const lats = items.filter((i) => (i.k === "x" || i.k === "m") && i.d !== null).map((i) => i.d);
  lats.sort((a, b) => a - b);
  const p95 = lats.length ? lats[Math.max(0, Math.ceil(lats.length * 0.95) - 1)] : 0;
  const maxLat = lats.length ? lats[lats.length - 1] : 1;
  $("f-slow-ms").value = (p95 / 1000).toFixed(2);

  // --- filters ----------------------------------------------------------------------------------
  const fServer = $("f-server"), fMethod = $("f-method"), fErr = $("f-errors"), fSlow = $("f-slow");
  const fSlowMs = $("f-slow-ms"), fDrift = $("f-drift"), fSearch = $("f-search");
  D.lanes.forEach((l, n) => {
    const o = el("option", "", l.label);
    o.value = String(n);
    fServer.appendChild(o);
  });
  const whats = new Set();
  for (const it of items) if (it.k !== "r") whats.add(what(it));
  [...whats].sort().forEach((w) => {
    const o = el("option", "", w);
    o.value = w;
    fMethod.appendChild(o);
  });
  if (!D.drift) $("f-drift-wrap").hidden = true;

  let lower = null; // lower-cased search text per item, made on the first search
  let visible = []; // indexes into items, in order
  let posOf = new Int32Array(items.length).fill(-1);
  function isSlow(it) {
    return it.d !== null && it.d >= parseFloat(fSlowMs.value || "0") * 1000;
  }
  function applyFilters() {
    const lane = fServer.value, m = fMethod.value, q = fSearch.value.trim().toLowerCase();
    if (q && !lower) lower = items.map((i) => (what(i) + "\n" + i.q + "\n" + (i.a || "")).toLowerCase());
    visible = [];
    posOf.fill(-1);
    for (let n = 0; n < items.length; n++) {
      const it = items[n];
      if (lane !== "" && String(it.s) !== lane) continue;
      if (m !== "" && what(it) !== m) continue;
      if (fErr.checked && it.e === 0) continue;
      if (fSlow.checked && !isSlow(it)) continue;
      if (fDrift.checked && !it.dr) continue;
      if (q && lower[n].indexOf(q) < 0) continue;
      posOf[n] = visible.length;
      visible.push(n);
    }
    $("count").textContent = visible.length + " of " + items.length + " shown";
    layout();
    drawTimeline();
  }
  let searchTimer = 0;
  fSearch.addEventListener("input", () => {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(applyFilters, 150);
  });
  // Enter (or leaving the box) applies the search at once.
  fSearch.addEventListener("change", () => { clearTimeout(searchTimer); applyFilters(); });
  for (const f of [fServer, fMethod, fErr, fSlow, fSlowMs, fDrift]) f.addEventListener("change", applyFilters);

  // --- the list: only the rows in view are in the DOM ------------------------------------------
  const list = $("list"), spacer = $("spacer");
  const open = new Map(); // item index -> measured height of its open row
  const details = new Map(); // item index -> its detail element, built once
  function openSorted() {
    return [...open.keys()].filter((n) => posOf[n] >= 0).sort((a, b) => posOf[a] - posOf[b]);
  }
  function topOf(pos, sorted) {
    let y = pos * ROW;
    for (const n of sorted) {
      if (posOf[n] >= pos) break;
      y += open.get(n) - ROW;
    }
    return y;
  }
  function posAt(y, sorted) {
    let extra = 0;
    for (const n of sorted) {
      const top = posOf[n] * ROW + extra;
      if (y < top) break;
      if (y < top + open.get(n)) return posOf[n];
      extra += open.get(n) - ROW;
    }
    return Math.floor((y - extra) / ROW);
  }
  function layout() {
    const sorted = openSorted();
    spacer.style.height = topOf(visible.length, sorted) + "px";
    render();
  }
  let frame = 0;
  list.addEventListener("scroll", () => {
    if (!frame) frame = requestAnimationFrame(() => { frame = 0; render(); });
  });
  window.addEventListener("resize", () => { layout(); sizeCanvas(); });

  function render() {
    const sorted = openSorted();
    const top = list.scrollTop, h = list.clientHeight || 600;
    const first = Math.max(0, posAt(top, sorted) - 5);
    const last = Math.min(visible.length - 1, posAt(top + h, sorted) + 5);
    spacer.textContent = "";
    let remeasure = false;
    for (let pos = first; pos <= last; pos++) {
      const n = visible[pos];
      const row = rowOf(n);
      row.style.top = topOf(pos, sorted) + "px";
      spacer.appendChild(row);
      if (open.has(n)) {
        const real = row.offsetHeight;
        if (real !== open.get(n)) { open.set(n, real); remeasure = true; }
      }
    }
    if (remeasure) layout();
  }

  function rowOf(n) {
    const it = items[n];
    const row = el("div", "row" + (it.p ? " child" : "") + (open.has(n) ? " open" : ""));
    row.dataset.item = String(n);
    row.dataset.line = String(it.l[0]);
    const head = el("div", "head");
    head.appendChild(el("span", "c-line", it.l[0]));
    head.appendChild(el("span", "c-time", (it.t / 1e6).toFixed(3) + " s"));
    head.appendChild(el("span", "c-lane", D.lanes[it.s].label));
    head.appendChild(el("span", "c-dir", it.dir === "c2s" ? "→" : "←"));
    head.appendChild(el("span", "c-kind k-" + it.k, KIND[it.k]));
    head.appendChild(el("span", "c-what", what(it) + (it.id !== undefined && it.k !== "m" ? "  #" + it.id : "")));
    const lat = el("span", "c-lat" + (isSlow(it) ? " slow" : ""));
    if (it.d !== null) {
      const bar = el("b");
      bar.style.width = Math.max(2, Math.round(70 * Math.log1p(it.d) / Math.log1p(maxLat))) + "px";
      lat.appendChild(bar);
      lat.appendChild(el("span", "", ms(it.d)));
    }
    head.appendChild(lat);
    const flag = el("span", "c-flag");
    if (it.e === 1) flag.appendChild(el("span", "badge b-err", "error"));
    if (it.e === 2 && it.k !== "n" && it.k !== "r") flag.appendChild(el("span", "badge b-none", "no answer"));
    if (it.dr) flag.appendChild(el("span", "badge b-drift", it.dr.o));
    head.appendChild(flag);
    head.addEventListener("click", () => toggle(n));
    row.appendChild(head);
    if (open.has(n)) row.appendChild(detailOf(n));
    return row;
  }
  const KIND = { x: "request", s: "srv request", n: "notification", r: "line", m: "model call" };

  function toggle(n) {
    if (open.has(n)) open.delete(n);
    else open.set(n, ROW);
    layout();
  }

  function pane(title, text) {
    const p = el("div", "pane");
    p.appendChild(el("h3", "", title));
    const pre = el("pre", "json");
    pre.appendChild(pretty(text));
    p.appendChild(pre);
    return p;
  }
  function detailOf(n) {
    if (details.has(n)) return details.get(n);
    const it = items[n];
    const d = el("div", "detail");
    const cols = el("div", "cols");
    const reqTitle = (it.k === "n" || it.k === "r" ? "message" : "request") + " · tape line " + it.l[0];
    cols.appendChild(pane(reqTitle, it.q));
    if (it.a !== undefined && it.a !== null) cols.appendChild(pane("answer · tape line " + it.l[1], it.a));
    else if (it.e === 2 && it.k !== "n" && it.k !== "r") cols.appendChild(pane("answer", "(no answer on the tape)"));
    d.appendChild(cols);
    if (it.dr) d.appendChild(driftOf(it));
    details.set(n, d);
    return d;
  }
  function driftOf(it) {
    const dr = it.dr;
    const box = el("div", "drift");
    const src = D.drift ? D.drift.source : "";
    let head = "drift (" + src + "): " + dr.o;
    if (dr.ol) head += " · the other side's tape line " + dr.ol;
    box.appendChild(el("h3", "", head));
    if (dr.det) box.appendChild(el("div", "", dr.det));
    if (dr.c.length) {
      const t = el("table", "changes");
      const hr = el("tr");
      for (const h of ["kind", "path", "recorded", src === "diff" ? "other tape" : "observed"]) hr.appendChild(el("th", "", h));
      t.appendChild(hr);
      for (const c of dr.c) {
        const tr = el("tr");
        tr.appendChild(el("td", "", c.kind));
        tr.appendChild(el("td", "", c.path));
        for (const v of [c.recorded, c.observed]) {
          const td = el("td");
          const pre = el("pre", "json");
          pre.appendChild(v === undefined ? document.createTextNode("(absent)") : pretty(v));
          td.appendChild(pre);
          tr.appendChild(td);
        }
        t.appendChild(tr);
      }
      box.appendChild(t);
    }
    if (dr.oa !== undefined) {
      const cols = el("div", "cols");
      cols.appendChild(pane("answer here · tape line " + it.l[1], it.a || ""));
      cols.appendChild(pane("answer on the other tape", dr.oa));
      box.appendChild(cols);
    }
    return box;
  }

  // --- pretty, coloured JSON, numbers and strings exactly as taped ------------------------------
  const MARKER = /\[REDACTED:[a-z0-9:_\-]+?\]/g;
  function tokens(s) {
    const out = [];
    let i = 0;
    const n = s.length;
    while (i < n) {
      const c = s[i];
      if (c === " " || c === "\n" || c === "\r" || c === "\t") { i++; continue; }
      if ("{}[],:".indexOf(c) >= 0) { out.push([c, c]); i++; continue; }
      if (c === '"') {
        let j = i + 1;
        while (j < n && s[j] !== '"') j += s[j] === "\\" ? 2 : 1;
        if (j >= n) return null;
        out.push(["s", s.slice(i, j + 1)]);
        i = j + 1;
        continue;
      }
      const m = /^(-?\d+(\.\d+)?([eE][+-]?\d+)?|true|false|null)/.exec(s.slice(i, i + 400));
      if (!m) return null;
      out.push([/^[tfn]/.test(m[0]) ? "l" : "d", m[0]]);
      i += m[0].length;
    }
    return out;
  }
  function strNode(text, cls) {
    const span = el("span", cls);
    let last = 0;
    MARKER.lastIndex = 0;
    let m;
    while ((m = MARKER.exec(text))) {
      if (m.index > last) span.appendChild(document.createTextNode(text.slice(last, m.index)));
      const r = el("span", "redacted", m[0]);
      r.title = "redacted on the tape (rule " + m[0].slice(10, -1) + ")";
      span.appendChild(r);
      last = m.index + m[0].length;
    }
    if (last < text.length) span.appendChild(document.createTextNode(text.slice(last)));
    return span;
  }
  function pretty(text) {
    const f = document.createDocumentFragment();
    const toks = text.length <= 2 * 1024 * 1024 ? tokens(text) : null;
    if (!toks || !toks.length) {
      f.appendChild(strNode(text, ""));
      return f;
    }
    let depth = 0;
    const nl = () => f.appendChild(document.createTextNode("\n" + "  ".repeat(depth)));
    for (let k = 0; k < toks.length; k++) {
      const [t, v] = toks[k];
      const next = toks[k + 1];
      if (t === "{" || t === "[") {
        f.appendChild(el("span", "j-p", v));
        if (next && (next[0] === "}" || next[0] === "]")) {
          f.appendChild(el("span", "j-p", next[1]));
          k++;
        } else { depth++; nl(); }
      } else if (t === "}" || t === "]") {
        depth = Math.max(0, depth - 1);
        nl();
        f.appendChild(el("span", "j-p", v));
      } else if (t === ",") {
        f.appendChild(el("span", "j-p", ","));
        nl();
      } else if (t === ":") {
        f.appendChild(el("span", "j-p", ": "));
      } else if (t === "s") {
        f.appendChild(strNode(v, next && next[0] === ":" ? "j-key" : "j-str"));
      } else {
        f.appendChild(el("span", t === "d" ? "j-num" : "j-lit", v));
      }
    }
    return f;
  }

  // --- the timeline: one lane per server and model label; a bar per call, its length the latency
  const canvas = $("tl-canvas");
  const ctx = canvas.getContext("2d");
  const LANE = 26, AXIS = 20, LABEL = 110;
  const span = Math.max(D.end_us, 1);
  let v0 = 0, v1 = span;
  function sizeCanvas() {
    const w = canvas.parentElement.clientWidth || 800;
    const h = AXIS + LANE * Math.max(1, D.lanes.length) + 4;
    const r = window.devicePixelRatio || 1;
    canvas.width = Math.round(w * r);
    canvas.height = Math.round(h * r);
    canvas.style.height = h + "px";
    ctx.setTransform(r, 0, 0, r, 0, 0);
    drawTimeline();
  }
  function xOf(t) {
    const w = canvas.clientWidth - LABEL - 8;
    return LABEL + ((t - v0) / (v1 - v0)) * w;
  }
  function tOf(x) {
    const w = canvas.clientWidth - LABEL - 8;
    return v0 + ((x - LABEL) / w) * (v1 - v0);
  }
  const css = getComputedStyle(document.documentElement);
  const C = (name) => css.getPropertyValue(name).trim();
  const COL = { ok: C("--ok"), err: C("--err"), none: C("--none"), slow: C("--slow"),
    drift: C("--drift"), srv: C("--srv"), note: C("--note"), model: C("--model") };
  function drawTimeline() {
    const w = canvas.clientWidth, h = canvas.clientHeight;
    ctx.clearRect(0, 0, w, h);
    ctx.font = "11px system-ui, sans-serif";
    ctx.textBaseline = "middle";
    D.lanes.forEach((l, n) => {
      const y = AXIS + n * LANE;
      ctx.fillStyle = n % 2 ? "#fafafa" : "#f3f5f7";
      ctx.fillRect(0, y, w, LANE);
      ctx.fillStyle = "#333";
      ctx.fillText(l.label.slice(0, 16), 6, y + LANE / 2);
    });
    // The axis: about ten ticks, on round numbers.
    const range = v1 - v0;
    const step = Math.pow(10, Math.floor(Math.log10(range / 8)));
    const tick = [1, 2, 5, 10].map((m) => m * step).find((s) => range / s <= 10) || step * 10;
    ctx.fillStyle = "#555";
    ctx.strokeStyle = "#ddd";
    for (let t = Math.ceil(v0 / tick) * tick; t <= v1; t += tick) {
      const x = xOf(t);
      ctx.fillText(ms(t), x + 2, AXIS / 2);
      ctx.beginPath();
      ctx.moveTo(x + 0.5, AXIS - 4);
      ctx.lineTo(x + 0.5, h);
      ctx.stroke();
    }
    const slowUs = parseFloat(fSlowMs.value || "0") * 1000;
    for (const n of visible) {
      const it = items[n];
      const end = it.d === null ? (it.e === 2 ? span : it.t) : it.t + it.d;
      if (end < v0 || it.t > v1) continue;
      const y = AXIS + it.s * LANE;
      const x = xOf(it.t);
      if (it.k === "n" || it.k === "r") {
        ctx.fillStyle = it.k === "r" ? COL.err : COL.note;
        ctx.fillRect(x, y + LANE - 7, 1, 5);
        continue;
      }
      const bw = Math.max(1.5, xOf(end) - x);
      let col = it.k === "s" ? COL.srv : it.k === "m" ? COL.model : COL.ok;
      if (it.d !== null && it.d >= slowUs && slowUs > 0) col = COL.slow;
      if (it.e === 1) col = COL.err;
      if (it.e === 2) col = COL.none;
      ctx.fillStyle = col;
      const top = it.k === "s" || it.p ? y + 12 : y + 4;
      ctx.fillRect(x, top, bw, it.k === "s" || it.p ? 7 : 10);
      if (it.dr) {
        ctx.strokeStyle = COL.drift;
        ctx.lineWidth = 2;
        ctx.strokeRect(x - 1, top - 1, bw + 2, 12);
        ctx.lineWidth = 1;
        ctx.strokeStyle = "#ddd";
      }
    }
  }
  // Wheel zooms around the pointer, a drag pans, a click opens the call under the pointer,
  // a double click shows the whole session again.
  canvas.addEventListener("wheel", (e) => {
    e.preventDefault();
    const at = tOf(e.offsetX);
    const f = Math.exp(e.deltaY * 0.002);
    const nr = Math.min(span, Math.max(50, (v1 - v0) * f));
    v0 = Math.max(0, at - (at - v0) * (nr / (v1 - v0)));
    v1 = Math.min(span, v0 + nr);
    drawTimeline();
  }, { passive: false });
  let drag = null;
  canvas.addEventListener("mousedown", (e) => { drag = { x: e.offsetX, v0, v1, moved: false }; });
  window.addEventListener("mouseup", () => { setTimeout(() => { drag = null; }, 0); });
  canvas.addEventListener("mousemove", (e) => {
    if (!drag || !(e.buttons & 1)) return;
    const dx = e.offsetX - drag.x;
    if (Math.abs(dx) > 2) drag.moved = true;
    const dt = (dx / (canvas.clientWidth - LABEL - 8)) * (drag.v1 - drag.v0);
    const r = drag.v1 - drag.v0;
    v0 = Math.min(Math.max(0, drag.v0 - dt), span - r);
    v1 = v0 + r;
    drawTimeline();
  });
  canvas.addEventListener("dblclick", () => { v0 = 0; v1 = span; drawTimeline(); });
  canvas.addEventListener("click", (e) => {
    if (drag && drag.moved) return;
    const lane = Math.floor((e.offsetY - AXIS) / LANE);
    const t = tOf(e.offsetX);
    const slack = (4 / canvas.clientWidth) * (v1 - v0) * 2;
    let best = -1, bestDist = Infinity;
    for (const n of visible) {
      const it = items[n];
      if (it.s !== lane) continue;
      const end = it.t + (it.d || 0);
      const dist = t < it.t ? it.t - t : t > end ? t - end : 0;
      if (dist < bestDist) { bestDist = dist; best = n; }
    }
    if (best >= 0 && bestDist <= slack + 1) reveal(best);
  });
  function reveal(n) {
    if (!open.has(n)) open.set(n, ROW);
    layout();
    list.scrollTop = topOf(posOf[n], openSorted());
    render();
  }

  // --- statistics ------------------------------------------------------------------------------
  (function statsTable() {
    const t = $("stats-table");
    const hr = el("tr");
    const heads = ["server", "kind", "method / target", "calls", "errors", "no answer", "p50", "p95",
      "max", "req mean", "req max", "ans mean", "ans max"];
    heads.forEach((h, i) => hr.appendChild(el("th", i < 3 ? "l" : "", h)));
    t.appendChild(hr);
    for (const r of D.stats) {
      const tr = el("tr", "pick");
      const w = r.target ? r.method + " " + r.target : r.method;
      const L = r.latency_us;
      const cells = [r.server, r.kind, w, r.calls, r.errors, r.unanswered, L ? ms(L.p50) : "-",
        L ? ms(L.p95) : "-", L ? ms(L.max) : "-", bytes(r.request_bytes.mean), bytes(r.request_bytes.max),
        r.calls > r.unanswered ? bytes(r.answer_bytes.mean) : "-", r.calls > r.unanswered ? bytes(r.answer_bytes.max) : "-"];
      cells.forEach((c, i) => tr.appendChild(el("td", i < 3 ? "l" : "", c)));
      tr.title = "show only these calls";
      tr.addEventListener("click", () => {
        fMethod.value = w;
        const lane = D.lanes.findIndex((l) => l.label === r.server);
        fServer.value = lane >= 0 ? String(lane) : "";
        applyFilters();
        list.scrollIntoView();
      });
      t.appendChild(tr);
    }
  })();

  sizeCanvas();
  applyFilters();
  window.mcptapeReport = { ready: true, items: items.length, renderMs: performance.now() - t0 };
  document.body.dataset.ready = "1";
})();
