// palrp-bench report.html: the sample explorer (palrp_bench/report/html.py writes the data this reads).
// No network, no library: every explorer's data is one <script type="application/json"> block, parsed when the
// explorer is opened; relevance arrays stay base64 until a sample is chosen.
"use strict";
(function () {
  const COLOURS = JSON.parse(document.getElementById("report-colours").textContent);
  const LUT = COLOURS.lut;
  const VIEWS = [["t", "total"], ["s", "semantic"], ["p", "positional"]];
  const SVGNS = "http" + "://www.w3.org/2000/svg"; // the SVG namespace name (an identifier, never fetched)
  const tooltip = document.getElementById("tooltip");

  // ---- decoding -------------------------------------------------------------------------------------------
  function bytesOf(b64) {
    const bin = atob(b64);
    const out = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
    return out;
  }
  function float32(b64) {
    const bytes = bytesOf(b64);
    const view = new DataView(bytes.buffer);
    const out = new Float64Array(bytes.length / 4);
    for (let i = 0; i < out.length; i++) out[i] = view.getFloat32(4 * i, true);
    return out;
  }
  // encode_scaled in html.py: integers times one scale per array
  function decodeScaled(blob) {
    const bytes = bytesOf(blob.b);
    const view = new DataView(bytes.buffer);
    const n = blob.bits === 16 ? bytes.length / 2 : bytes.length;
    const out = new Float64Array(n);
    for (let i = 0; i < n; i++) {
      out[i] = (blob.bits === 16 ? view.getInt16(2 * i, true) : view.getInt8(i)) * blob.k;
    }
    return out;
  }
  function maxAbs(values) {
    let m = 0;
    for (const v of values) if (Math.abs(v) > m) m = Math.abs(v);
    return m;
  }
  // relevance_colour in html.py: x = value / max|value| in [-1, 1] -> entry round((x + 1) / 2 * 255)
  function colourOf(x) {
    if (!isFinite(x)) x = 0;
    x = Math.max(-1, Math.min(1, x));
    return LUT[Math.round((x + 1) / 2 * (LUT.length - 1))];
  }
  function inkOf(hex) {
    const r = parseInt(hex.slice(1, 3), 16), g = parseInt(hex.slice(3, 5), 16), b = parseInt(hex.slice(5, 7), 16);
    return (0.299 * r + 0.587 * g + 0.114 * b) / 255 < 0.5 ? "#ffffff" : "#000000";
  }
  function num(x, digits) {
    if (x === null || x === undefined || !isFinite(x)) return "-";
    if (digits !== undefined) return x.toFixed(digits);
    const a = Math.abs(x);
    return a !== 0 && (a < 1e-3 || a >= 1e5) ? x.toExponential(3) : x.toPrecision(4);
  }
  // line breaks and tabs as visible marks, so every token keeps its own box
  function visible(token) {
    return token.replace(/\n/g, "\u21b5").replace(/\t/g, "\u21e5") || "\u2423";
  }
  function el(tag, attrs, children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "text") node.textContent = v;
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, v);
    }
    for (const c of children || []) if (c) node.appendChild(c);
    return node;
  }
  function svg(tag, attrs) {
    const node = document.createElementNS(SVGNS, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    return node;
  }

  // ---- tooltip ----------------------------------------------------------------------------------------------
  function showTip(target, lines) {
    tooltip.textContent = "";
    for (const line of lines) tooltip.appendChild(el("div", { text: line }));
    tooltip.hidden = false;
    const r = target.getBoundingClientRect();
    tooltip.style.left = Math.max(4, Math.min(window.innerWidth - 260, r.left + window.scrollX)) + "px";
    tooltip.style.top = (r.bottom + window.scrollY + 6) + "px";
  }
  function hideTip() { tooltip.hidden = true; }

  // ---- one explorer -------------------------------------------------------------------------------------------
  function Explorer(root, data) {
    this.root = root;
    this.d = data;
    const n = data.ids.length;
    this.n = n;
    this.correct = float32(data.correct);
    this.metricKeys = Object.keys(data.metrics).sort();
    this.metricCache = {};
    this.state = {
      metric: this.metricKeys[0] || "", a: data.methods.includes("pa_lrp") ? "pa_lrp" : data.methods[0],
      b: data.methods.includes("attnlrp") ? "attnlrp" : "", sort: "id", dir: 1, id: "", label: "", correct: "",
      page: 0, size: 50, selected: -1, view: "t", opacity: 0.7,
    };
    if (this.state.b === this.state.a) this.state.b = "";
    this.build();
  }
  Explorer.prototype.metric = function (key, method) {
    const k = key + "|" + method;
    if (!(k in this.metricCache)) {
      const b64 = (this.d.metrics[key] || {})[method];
      this.metricCache[k] = b64 ? float32(b64) : null;
    }
    return this.metricCache[k];
  };
  Explorer.prototype.build = function () {
    const d = this.d, s = this.state, self = this;
    const uid = this.root.id;
    const select = (label, id, options, value, onchange) => {
      const sel = el("select", { id: uid + "-" + id, onchange: (e) => onchange(e.target.value) });
      for (const [v, text] of options) {
        const o = el("option", { value: v, text: text });
        if (v === value) o.selected = true;
        sel.appendChild(o);
      }
      return el("label", { for: uid + "-" + id }, [document.createTextNode(label + " "), sel]);
    };
    const methods = d.methods.map((m) => [m, m]);
    const labels = [["", "all"]].concat([...new Set(d.labels.filter((x) => x !== ""))].sort().map((x) => [x, x]));
    const controls = el("div", { class: "controls", role: "group", "aria-label": "filter and choose columns" }, [
      el("label", { for: uid + "-id" }, [document.createTextNode("sample id "),
        el("input", { id: uid + "-id", type: "search", placeholder: "contains...", oninput: (e) => {
          s.id = e.target.value; s.page = 0; self.renderList(); } })]),
      select("label", "label", labels, s.label, (v) => { s.label = v; s.page = 0; self.renderList(); }),
      select("correct", "correct", [["", "all"], ["1", "correct"], ["0", "wrong"]], s.correct,
        (v) => { s.correct = v; s.page = 0; self.renderList(); }),
      select("metric", "metric", this.metricKeys.map((k) => [k, k + (d.higher[k] === true ? " \u2191" :
        d.higher[k] === false ? " \u2193" : "")]), s.metric, (v) => { s.metric = v; self.renderList(); }),
      select("method A", "a", methods, s.a, (v) => { s.a = v; self.renderList(); }),
      select("method B", "b", [["", "(none)"]].concat(methods), s.b, (v) => { s.b = v; self.renderList(); }),
      select("rows", "size", [["25", "25"], ["50", "50"], ["100", "100"], ["200", "200"]], String(s.size),
        (v) => { s.size = +v; s.page = 0; self.renderList(); }),
    ]);
    this.count = el("p", { class: "muted", "aria-live": "polite" });
    this.table = el("table", { class: "samples" });
    this.pager = el("div", { class: "pager" });
    this.detail = el("div", { class: "detail", "aria-live": "polite" });
    const list = el("div", { class: "list" }, [controls, this.count, el("div", { class: "table-wrap" }, [this.table]),
      this.pager]);
    this.root.appendChild(list);
    this.root.appendChild(this.detail);
    this.renderList();
  };
  Explorer.prototype.rows = function () {
    const d = this.d, s = this.state;
    const a = s.metric ? this.metric(s.metric, s.a) : null;
    const b = s.metric && s.b ? this.metric(s.metric, s.b) : null;
    const needle = s.id.toLowerCase();
    const out = [];
    for (let i = 0; i < this.n; i++) {
      if (needle && !d.ids[i].toLowerCase().includes(needle)) continue;
      if (s.label && d.labels[i] !== s.label) continue;
      if (s.correct !== "" && this.correct[i] !== +s.correct) continue;
      const va = a ? a[i] : NaN, vb = b ? b[i] : NaN;
      out.push({ i: i, a: va, b: vb, diff: va - vb });
    }
    const key = s.sort, dir = s.dir;
    const value = (r) => key === "id" ? null : key === "label" ? d.labels[r.i] :
      key === "correct" ? this.correct[r.i] : r[key];
    out.sort((x, y) => {
      if (key === "id") return dir * (x.i - y.i); // ids arrive in natural order
      const u = value(x), v = value(y);
      if (typeof u === "string") return dir * u.localeCompare(v);
      const bu = isFinite(u), bv = isFinite(v);
      if (!bu || !bv) return bu === bv ? x.i - y.i : bu ? -1 : 1; // missing values last, either direction
      return u === v ? x.i - y.i : dir * (u - v);
    });
    return out;
  };
  Explorer.prototype.renderList = function () {
    const d = this.d, s = this.state, self = this;
    const rows = this.rows();
    const pages = Math.max(1, Math.ceil(rows.length / s.size));
    s.page = Math.min(s.page, pages - 1);
    const shown = rows.slice(s.page * s.size, (s.page + 1) * s.size);
    this.count.textContent = rows.length + " of " + this.n + " samples";
    const columns = [["id", "sample id"], ["label", "label"], ["correct", "correct"], ["a", s.a]];
    if (s.b) columns.push(["b", s.b], ["diff", s.a + " \u2212 " + s.b]);
    const head = el("tr");
    for (const [key, text] of columns) {
      const th = el("th", { scope: "col", "aria-sort": s.sort === key ? (s.dir > 0 ? "ascending" : "descending")
        : "none" }, [el("button", { type: "button", class: "sort", "data-sort": key, text: text +
          (s.sort === key ? (s.dir > 0 ? " \u25b2" : " \u25bc") : ""), onclick: () => {
          if (s.sort === key) s.dir = -s.dir; else { s.sort = key; s.dir = key === "id" || key === "label" ? 1 : -1; }
          self.renderList(); } })]);
      head.appendChild(th);
    }
    const body = el("tbody", { onkeydown: (e) => self.listKey(e) });
    shown.forEach((r, k) => {
      const c = this.correct[r.i];
      const cells = [el("td", { text: d.ids[r.i] }), el("td", { text: d.labels[r.i] }),
        el("td", { text: isFinite(c) ? (c ? "yes" : "no") : "-" }), el("td", { class: "num", text: num(r.a) })];
      if (s.b) cells.push(el("td", { class: "num", text: num(r.b) }), el("td", { class: "num", text: num(r.diff) }));
      const tr = el("tr", { "data-index": r.i, "data-id": d.ids[r.i], tabindex: k === 0 ? "0" : "-1",
        "aria-selected": r.i === s.selected ? "true" : "false", onclick: () => self.select(r.i) }, cells);
      body.appendChild(tr);
    });
    this.table.textContent = "";
    this.table.appendChild(el("caption", { text: d.model + " / " + d.task + ": samples (" + (s.metric ?
      "per-sample " + s.metric : "no per-sample metric") + ")" }));
    this.table.appendChild(el("thead", {}, [head]));
    this.table.appendChild(body);
    this.pager.textContent = "";
    const go = (p) => { s.page = p; self.renderList(); };
    const previous = el("button", { type: "button", text: "previous", onclick: () => go(s.page - 1) });
    previous.disabled = s.page === 0;
    this.pager.appendChild(previous);
    this.pager.appendChild(el("span", { text: " page " + (s.page + 1) + " of " + pages + " " }));
    const next = el("button", { type: "button", text: "next", onclick: () => go(s.page + 1) });
    next.disabled = s.page >= pages - 1;
    this.pager.appendChild(next);
  };
  Explorer.prototype.listKey = function (e) {
    const tr = e.target.closest("tr");
    if (!tr) return;
    let to = null;
    if (e.key === "ArrowDown") to = tr.nextElementSibling;
    else if (e.key === "ArrowUp") to = tr.previousElementSibling;
    else if (e.key === "Home") to = tr.parentNode.firstElementChild;
    else if (e.key === "End") to = tr.parentNode.lastElementChild;
    else if (e.key === "Enter" || e.key === " ") { this.select(+tr.dataset.index); e.preventDefault(); return; }
    if (to) {
      tr.tabIndex = -1; to.tabIndex = 0; to.focus(); e.preventDefault();
    }
  };
  Explorer.prototype.select = function (i) {
    this.state.selected = i;
    for (const tr of this.table.querySelectorAll("tbody tr")) {
      tr.setAttribute("aria-selected", +tr.dataset.index === i ? "true" : "false");
    }
    this.renderDetail();
  };

  // ---- the chosen sample ------------------------------------------------------------------------------------
  Explorer.prototype.renderDetail = function () {
    const d = this.d, s = this.state, self = this, i = s.selected;
    this.detail.textContent = "";
    hideTip();
    if (i < 0) return;
    const c = this.correct[i];
    this.detail.appendChild(el("h4", { text: "sample " + d.ids[i] + (d.labels[i] ? ", label " + d.labels[i] : "") +
      (isFinite(c) ? (c ? ", predicted correctly" : ", predicted wrongly") : "") }));
    const det = d.details[i];
    if (!det) {
      this.detail.appendChild(el("p", { class: "muted", text: "explanations of this sample are not embedded (" +
        d.status + ")" }));
    } else {
      const image = !det.tokens;
      const switcher = el("fieldset", { class: "views" }, [el("legend", { text: "relevance shown" })]);
      for (const [key, text] of VIEWS) {
        const id = this.root.id + "-view-" + key;
        const input = el("input", { type: "radio", name: this.root.id + "-view", id: id, value: key,
          onchange: () => { s.view = key; self.renderMethods(); } });
        if (key === s.view) input.checked = true;
        switcher.appendChild(el("label", { for: id }, [input, document.createTextNode(" " + text)]));
      }
      if (image) {
        const slider = el("input", { type: "range", min: "0", max: "1", step: "0.05", value: String(s.opacity),
          id: this.root.id + "-opacity", oninput: (e) => { s.opacity = +e.target.value; self.renderMethods(); } });
        switcher.appendChild(el("label", { for: this.root.id + "-opacity" }, [document.createTextNode(
          " overlay opacity "), slider]));
      }
      this.detail.appendChild(switcher);
      this.detail.appendChild(legendBar());
      this.methodsBox = el("div", { class: image ? "methods images" : "methods" });
      this.detail.appendChild(this.methodsBox);
      this.renderMethods();
    }
    this.detail.appendChild(this.sampleCurves(i));
  };
  Explorer.prototype.renderMethods = function () {
    const d = this.d, s = this.state, det = d.details[s.selected];
    const box = this.methodsBox;
    box.textContent = "";
    hideTip();
    const viewName = VIEWS.find((v) => v[0] === s.view)[1];
    for (const method of d.methods) {
      const m = det.m[method];
      const panel = el("section", { class: "method", "data-method": method, "aria-label": method });
      panel.appendChild(el("h5", { text: method }));
      if (!m) {
        panel.appendChild(el("p", { class: "muted", text: "not cached for this sample" }));
        box.appendChild(panel);
        continue;
      }
      const facts = [];
      if (m.explained !== undefined) facts.push("explained " + m.explained);
      if (m.logit !== undefined) facts.push("logit " + num(m.logit));
      panel.appendChild(el("p", { class: "muted", text: facts.join(", ") }));
      if (!m[s.view]) {
        panel.appendChild(el("p", { class: "muted", text: "no " + viewName + " part stored for this method" }));
        box.appendChild(panel);
        continue;
      }
      if (det.tokens) panel.appendChild(this.tokens(method, m, m.tokens || det.tokens, viewName));
      else panel.appendChild(this.overlay(method, m, det.image, viewName));
      box.appendChild(panel);
    }
  };
  Explorer.prototype.tokens = function (method, m, tokens, viewName) {
    const s = this.state;
    const parts = {};
    for (const [key] of VIEWS) if (m[key]) parts[key] = decodeScaled(m[key]);
    const shown = parts[s.view];
    const top = maxAbs(shown);
    const box = el("div", { class: "tokens", tabindex: "0", role: "group", "data-view": s.view,
      "aria-label": method + ": " + tokens.length + " tokens coloured by " + viewName + " relevance, largest |value| "
        + num(top) + "; arrow keys step through the tokens" });
    const lines = (j) => ["token " + JSON.stringify(tokens[j]) + " at position " + j,
      "total " + num(parts.t ? parts.t[j] : NaN), "semantic " + num(parts.s ? parts.s[j] : NaN),
      "positional " + num(parts.p ? parts.p[j] : NaN)];
    const spans = [];
    for (let j = 0; j < tokens.length; j++) {
      const bg = colourOf(top > 0 ? shown[j] / top : 0);
      const span = el("span", { class: "tok", id: this.root.id + "-" + method + "-tok-" + j, "data-position": j,
        "data-value": String(shown[j]), text: visible(tokens[j]) });
      span.style.backgroundColor = bg;
      span.style.color = inkOf(bg);
      span.addEventListener("mouseenter", () => showTip(span, lines(j)));
      span.addEventListener("mouseleave", hideTip);
      spans.push(span);
      box.appendChild(span);
    }
    let active = -1;
    const activate = (j) => {
      if (active >= 0) spans[active].classList.remove("active");
      active = Math.max(0, Math.min(spans.length - 1, j));
      spans[active].classList.add("active");
      box.setAttribute("aria-activedescendant", spans[active].id);
      showTip(spans[active], lines(active));
      box.setAttribute("aria-description", lines(active).join(", "));
    };
    box.addEventListener("keydown", (e) => {
      if (e.key === "ArrowRight" || e.key === "ArrowDown") { activate(active + 1); e.preventDefault(); }
      else if (e.key === "ArrowLeft" || e.key === "ArrowUp") { activate(active - 1); e.preventDefault(); }
      else if (e.key === "Home") { activate(0); e.preventDefault(); }
      else if (e.key === "End") { activate(spans.length - 1); e.preventDefault(); }
      else if (e.key === "Escape") hideTip();
    });
    box.addEventListener("blur", hideTip);
    if (top === 0) {
      return el("div", {}, [el("p", { class: "muted", text: "every " + viewName + " value is 0" }), box]);
    }
    return box;
  };
  Explorer.prototype.overlay = function (method, m, image, viewName) {
    const s = this.state;
    const blob = m[s.view];
    const values = decodeScaled(blob);
    const [h, w] = blob.shape;
    const top = maxAbs(values);
    let best = 0, positive = 0;
    for (let j = 0; j < values.length; j++) {
      if (values[j] > values[best]) best = j;
      if (values[j] > 0) positive++;
    }
    const canvas = el("canvas", { class: "overlay", role: "img", "data-view": s.view,
      "aria-label": method + ", " + viewName + " relevance over the image: " + h + " x " + w + " cells, " +
        Math.round(100 * positive / values.length) + "% positive, largest at row " + Math.floor(best / w) +
        ", column " + (best % w) + " (largest |value| " + num(top) + ")" });
    const cells = document.createElement("canvas");
    cells.width = w; cells.height = h;
    const ctx = cells.getContext("2d");
    const pixels = ctx.createImageData(w, h);
    for (let j = 0; j < values.length; j++) {
      const x = top > 0 ? values[j] / top : 0;
      const hex = colourOf(x);
      pixels.data[4 * j] = parseInt(hex.slice(1, 3), 16);
      pixels.data[4 * j + 1] = parseInt(hex.slice(3, 5), 16);
      pixels.data[4 * j + 2] = parseInt(hex.slice(5, 7), 16);
      pixels.data[4 * j + 3] = Math.round(255 * Math.min(0.9, 1.6 * Math.abs(x))); // 0 relevance: transparent
    }
    ctx.putImageData(pixels, 0, 0);
    const draw = (img) => {
      const W = img ? img.naturalWidth : w * 4, H = img ? img.naturalHeight : h * 4;
      canvas.width = W; canvas.height = H;
      const c2 = canvas.getContext("2d");
      c2.imageSmoothingEnabled = false;
      if (img) c2.drawImage(img, 0, 0, W, H);
      c2.globalAlpha = s.opacity;
      c2.drawImage(cells, 0, 0, W, H);
    };
    if (image) {
      const img = new Image();
      img.onload = () => draw(img);
      img.src = image;
    } else draw(null);
    return canvas;
  };
  Explorer.prototype.sampleCurves = function (i) {
    const d = this.d;
    const box = el("div", { class: "sample-curves" }, [el("h5", { text: "perturbation curves of this sample" })]);
    for (const key of Object.keys(d.curves).sort()) {
      const entry = d.curves[key];
      const steps = entry.steps, k = steps.length;
      const lines = [];
      d.methods.forEach((method, j) => {
        if (!entry.methods[method]) return;
        if (!entry.decoded) entry.decoded = {};
        if (!entry.decoded[method]) entry.decoded[method] = float32(entry.methods[method]);
        lines.push([method, j, entry.decoded[method].slice(i * k, (i + 1) * k)]);
      });
      box.appendChild(smallPlot(key, steps, lines, d.ids[i]));
    }
    return box;
  };

  function smallPlot(key, steps, lines, id) {
    const W = 310, H = 170, L = 50, R = 8, T = 8, B = 30;
    let lo = Infinity, hi = -Infinity;
    for (const [, , ys] of lines) for (const y of ys) if (isFinite(y)) { lo = Math.min(lo, y); hi = Math.max(hi, y); }
    if (!isFinite(lo)) { lo = 0; hi = 1; }
    if (hi - lo < 1e-12) { lo -= 0.5; hi += 0.5; }
    const x0 = steps[0], x1 = steps[steps.length - 1];
    const sx = (x) => L + (x - x0) / ((x1 - x0) || 1) * (W - L - R);
    const sy = (y) => T + (hi - y) / (hi - lo) * (H - T - B);
    const desc = lines.map(([m, , ys]) => m + ": " + Array.from(ys, (y) => num(y)).join(" ")).join("; ");
    const root = svg("svg", { width: W, height: H, viewBox: "0 0 " + W + " " + H, role: "img",
      "aria-label": key + " of sample " + id + " at " + steps.join(", ") + ": " + desc, class: "curve small" });
    root.appendChild(svg("rect", { x: L, y: T, width: W - L - R, height: H - T - B, class: "plot-bg" }));
    for (const t of [lo, (lo + hi) / 2, hi]) {
      root.appendChild(svg("line", { x1: L, x2: W - R, y1: sy(t), y2: sy(t), class: "grid" }));
      const label = svg("text", { x: L - 3, y: sy(t) + 3, class: "tick", "text-anchor": "end" });
      label.textContent = String(+t.toPrecision(3));
      root.appendChild(label);
    }
    for (const x of [x0, x1]) {
      const label = svg("text", { x: sx(x), y: H - B + 13, class: "tick", "text-anchor": "middle" });
      label.textContent = String(x);
      root.appendChild(label);
    }
    const name = svg("text", { x: (L + W - R) / 2, y: H - 4, class: "label", "text-anchor": "middle" });
    name.textContent = key;
    root.appendChild(name);
    for (const [method, j, ys] of lines) {
      const pts = [];
      steps.forEach((x, q) => { if (isFinite(ys[q])) pts.push(sx(x).toFixed(1) + "," + sy(ys[q]).toFixed(1)); });
      const line = svg("polyline", { points: pts.join(" "), fill: "none", stroke: COLOURS.palette[j % COLOURS.palette.length],
        "stroke-width": "1.6", "stroke-dasharray": COLOURS.dashes[j % COLOURS.dashes.length], "data-method": method });
      const title = svg("title");
      title.textContent = method;
      line.appendChild(title);
      root.appendChild(line);
    }
    const legend = el("ul", { class: "legend" });
    for (const [method, j] of lines) {
      const sw = svg("svg", { width: 30, height: 8, "aria-hidden": "true" });
      sw.appendChild(svg("line", { x1: 1, x2: 29, y1: 4, y2: 4, stroke: COLOURS.palette[j % COLOURS.palette.length],
        "stroke-width": 2, "stroke-dasharray": COLOURS.dashes[j % COLOURS.dashes.length] }));
      const li = el("li");
      li.appendChild(sw);
      li.appendChild(document.createTextNode(" " + method));
      legend.appendChild(li);
    }
    return el("figure", { class: "small-figure" }, [root, el("figcaption", {}, [legend])]);
  }

  function legendBar() {
    const stops = [];
    for (let k = 0; k < LUT.length; k += 15) stops.push(LUT[k]);
    stops.push(LUT[LUT.length - 1]);
    const bar = el("div", { class: "colour-bar", role: "img", "aria-label": "colour scale: blue = negative, white = " +
      "0, red = positive, relative to each method's largest |value|" });
    bar.style.background = "linear-gradient(to right, " + stops.join(", ") + ")";
    return el("div", { class: "colour-legend" }, [el("span", { text: "\u22121 (blue)" }), bar,
      el("span", { text: "+1 (red) \u00d7 each method's max |value|" })]);
  }

  // ---- start ------------------------------------------------------------------------------------------------
  function open(details) {
    if (details.dataset.ready) return;
    details.dataset.ready = "1";
    const k = details.dataset.index;
    const data = JSON.parse(document.getElementById("explorer-data-" + k).textContent);
    const root = document.getElementById("explorer-" + k);
    root.explorer = new Explorer(root, data);
  }
  for (const details of document.querySelectorAll("details.explorer")) {
    details.addEventListener("toggle", () => { if (details.open) open(details); });
    if (details.open) open(details);
  }
  document.addEventListener("keydown", (e) => { if (e.key === "Escape") hideTip(); });
  document.body.dataset.ready = "1";
})();
