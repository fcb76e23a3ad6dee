// attnscope explorer: fetches one map per panel from the server (/api/map) and draws it into a canvas;
// the metric curves are plotly.js line charts.
"use strict";

const $ = (id) => document.getElementById(id);
const state = {
  index: null,
  prompts: new Map(),
  cosine: new Map(),
  curves: new Map(),
  heads: new Map(),
  renders: 0,
  timings: [],
};

// Every parameter is URL-encoded (URLSearchParams): store ids and groups may hold "&", "#", "+".
const apiURL = (path, params) => path + "?" + new URLSearchParams(params);

async function failure(response) {
  // the server answers every error as {"error": ...}
  const text = await response.text();
  try {
    return new Error(`${response.status}: ${JSON.parse(text).error}`);
  } catch {
    return new Error(`${response.status}: ${text.slice(0, 200)}`);
  }
}

async function getJSON(url) {
  const response = await fetch(url);
  if (!response.ok) throw await failure(response);
  return response.json();
}

async function getMap(params) {
  const response = await fetch(apiURL("/api/map", params));
  if (!response.ok) throw await failure(response);
  const [n, m] = response.headers.get("X-Shape").split(",").map(Number);
  return { n, m, data: new Float32Array(await response.arrayBuffer()) };
}

function showProblem(text) {
  $("problems").textContent += ($("problems").textContent ? "\n" : "") + text;
}

function fill(select, options, keep) {
  const previous = keep ? select.value : null;
  select.replaceChildren(...options.map(([value, label]) => new Option(label, value)));
  if (previous !== null && options.some(([value]) => String(value) === previous)) select.value = previous;
}

const storesOf = (model, experiment) =>
  state.index.stores.filter((s) => s.model === model && (experiment === undefined || s.experiment === experiment));
const unique = (values) => [...new Set(values)];

function selectedStores() {
  return [...document.querySelectorAll("#variants input:checked")].map((box) => box.value);
}

function baseStore() {
  // the trained variant of the chosen model and experiment (the difference view's base)
  const trained = storesOf($("model").value, $("experiment").value).find((s) => s.variant === "trained");
  return trained ? trained.id : null;
}

function storeById(id) {
  return state.index.stores.find((s) => s.id === id);
}

const hasKind = (id, kind) => storeById(id).kinds.includes(kind);

function onModel() {
  fill($("experiment"), unique(storesOf($("model").value).map((s) => s.experiment)).map((e) => [e, e]), true);
  onExperiment();
}

function onExperiment() {
  const stores = storesOf($("model").value, $("experiment").value);
  const checked = new Set(selectedStores().map((id) => storeById(id).variant));
  $("variants").replaceChildren(
    ...stores.map((s, i) => {
      const label = document.createElement("label");
      const box = Object.assign(document.createElement("input"), { type: "checkbox", value: s.id });
      box.className = "variant";
      box.dataset.variant = s.variant;
      box.checked = checked.size ? checked.has(s.variant) : s.variant === "trained" || (i === 0 && !baseStore());
      box.addEventListener("change", render);
      label.append(box, " " + s.variant);
      return label;
    })
  );
  const first = stores[0];
  fill($("prompt"), first.prompts.map((p) => [p.group, `${p.target} (${p.prompt_id})`]), true);
  fill($("layer"), [...Array(first.num_layers).keys()].map((l) => [l, l]), true);
  fill(
    $("head"),
    [[state.index.head_mean, "mean"], ...[...Array(first.num_heads).keys()].map((h) => [h, h])],
    true
  );
  render();
}

function prompt(store, group) {
  return cached(state.prompts, store + "|" + group, () => getJSON(apiURL("/api/prompt", { store, group })));
}

// The maps are drawn into a canvas (one ImageData pixel per cell through a 256-colour table, then
// scaled): plotly's SVG heatmap took seconds on a 1024 × 1024 map and its WebGL heatmapgl is gone.
const MARGIN = { left: 78, right: 60, top: 22, bottom: 78 };
const FONT = 9; // px: tick labels; only every ceil(FONT / cell)-th label is drawn

function packed(table) {
  // 256 RGB rows -> one little-endian RGBA word per entry (ImageData's byte order)
  return Uint32Array.from(table, ([r, g, b]) => (255 << 24) | (b << 16) | (g << 8) | r);
}

function cssColor(hex) {
  const v = Number.parseInt(hex.slice(1), 16);
  return packed([[(v >> 16) & 255, (v >> 8) & 255, v & 255]])[0];
}

function cellImage(map, scale) {
  const { n, m, data } = map;
  const image = new ImageData(m, n);
  const pixels = new Uint32Array(image.data.buffer);
  const lut = scale.lut;
  const mask = cssColor(state.index.colors.mask);
  const factor = 255 / (scale.zmax - scale.zmin || 1);
  for (let q = 0; q < n; q++) {
    const last = scale.causal ? Math.min(q, m - 1) : m - 1;
    const row = q * m;
    for (let k = 0; k <= last; k++) {
      const v = data[row + k];
      const i = Math.round((v - scale.zmin) * factor);
      pixels[row + k] = Number.isNaN(v) ? mask : lut[i < 0 ? 0 : i > 255 ? 255 : i];
    }
    pixels.fill(mask, row + last + 1, row + m); // the non-causal upper triangle
  }
  const cells = document.createElement("canvas");
  [cells.width, cells.height] = [m, n];
  cells.getContext("2d").putImageData(image, 0, 0);
  return cells;
}

function ticks(ctx, labels, count, cell, place) {
  const step = Math.max(1, Math.ceil((FONT + 1) / cell));
  for (let i = 0; i < count; i += step) place(String(labels[i] ?? i).slice(0, 12), i);
}

function notice(div, title, text) {
  // a panel without a map: what is not available and why (never a map of zeros)
  div.replaceChildren(Object.assign(document.createElement("p"), { className: "notice", textContent: `${title}: ${text}` }));
  div.explorer = null;
  Object.assign(div.dataset, { title, notice: text });
}

function heatmap(div, title, map, axis, scale) {
  div.querySelector(".notice")?.remove();
  delete div.dataset.notice;
  let canvas = div.querySelector("canvas");
  if (!canvas) {
    div.append((canvas = document.createElement("canvas")));
    const tip = Object.assign(document.createElement("div"), { className: "tip" });
    const cell = Object.assign(document.createElement("div"), { className: "cell" });
    div.append(tip, cell);
    canvas.addEventListener("mousemove", (event) => onHover(div, event));
    canvas.addEventListener("mouseleave", () => hideHover(div));
    canvas.addEventListener("click", (event) => {
      const at = cellAt(div, event);
      if (at) onClick(div, at[0]);
    });
  }
  hideHover(div); // a label of the previous view would stay on the new one
  const [width, height] = [div.clientWidth, div.clientHeight];
  const ratio = window.devicePixelRatio || 1;
  [canvas.width, canvas.height] = [width * ratio, height * ratio];
  Object.assign(canvas.style, { width: width + "px", height: height + "px" });
  const ctx = canvas.getContext("2d");
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  ctx.clearRect(0, 0, width, height);
  const { n, m } = map;
  const side = Math.min(width - MARGIN.left - MARGIN.right, height - MARGIN.top - MARGIN.bottom);
  const box = { x0: MARGIN.left, y0: MARGIN.top, cw: side / m, ch: side / n, side };
  ctx.imageSmoothingEnabled = false;
  ctx.drawImage(cellImage(map, scale), box.x0, box.y0, side, side);
  // boundaries: before the first token of each shot, the target and the generated clue
  ctx.strokeStyle = state.index.colors.boundary;
  ctx.lineWidth = 1.2;
  ctx.beginPath();
  for (const p of axis.boundaries) {
    if (p < m) ctx.moveTo(box.x0 + p * box.cw, box.y0), ctx.lineTo(box.x0 + p * box.cw, box.y0 + side);
    if (p < n) ctx.moveTo(box.x0, box.y0 + p * box.ch), ctx.lineTo(box.x0 + side, box.y0 + p * box.ch);
  }
  ctx.stroke();
  ctx.fillStyle = "#222";
  ctx.font = `${FONT}px sans-serif`;
  ctx.textAlign = "right";
  ctx.textBaseline = "middle";
  ticks(ctx, axis.labels, n, box.ch, (text, i) => ctx.fillText(text, box.x0 - 3, box.y0 + (i + 0.5) * box.ch));
  ticks(ctx, axis.labels, m, box.cw, (text, i) => {
    ctx.save();
    ctx.translate(box.x0 + (i + 0.5) * box.cw, box.y0 + side + 3);
    ctx.rotate(-Math.PI / 2);
    ctx.fillText(text, 0, 0);
    ctx.restore();
  });
  // colour bar
  const bar = { x: box.x0 + side + 8, w: 10 };
  for (let y = 0; y < side; y++) {
    const [r, g, b] = scale.table[Math.round(255 * (1 - y / (side - 1)))];
    ctx.fillStyle = `rgb(${r},${g},${b})`;
    ctx.fillRect(bar.x, box.y0 + y, bar.w, 1.5);
  }
  ctx.fillStyle = "#222";
  ctx.textAlign = "left";
  ctx.fillText(scale.zmax.toPrecision(3), bar.x + bar.w + 2, box.y0 + 4);
  ctx.fillText(scale.zmin.toPrecision(3), bar.x + bar.w + 2, box.y0 + side - 4);
  ctx.font = "12px sans-serif";
  ctx.textAlign = "center";
  ctx.fillText(title, box.x0 + side / 2, MARGIN.top / 2);
  div.explorer = { map, axis, box, scale };
  div.dataset.title = title;
}

function cellAt(div, event) {
  // [query, key] under the mouse, or null outside the cells or in the masked triangle
  const { map, box, scale } = div.explorer;
  const rect = div.querySelector("canvas").getBoundingClientRect();
  const k = Math.floor((event.clientX - rect.left - box.x0) / box.cw);
  const q = Math.floor((event.clientY - rect.top - box.y0) / box.ch);
  if (q < 0 || k < 0 || q >= map.n || k >= map.m || (scale.causal && k > q)) return null;
  return [q, k];
}

function hideHover(div) {
  for (const name of [".tip", ".cell"]) div.querySelector(name).style.display = "none";
}

function onHover(div, event) {
  const at = cellAt(div, event);
  if (!at) return hideHover(div);
  const [q, k] = at;
  const { map, axis, box } = div.explorer;
  const value = map.data[q * map.m + k];
  Object.assign($("hover").dataset, {
    panel: div.dataset.panel,
    query: q,
    key: k,
    value: String(value),
    queryLabel: axis.labels[q],
    keyLabel: axis.labels[k],
  });
  const text = `query ${q} ${JSON.stringify(axis.labels[q])} -> key ${k} ${JSON.stringify(axis.labels[k])}: ${value.toPrecision(4)}`;
  $("hover").textContent = `${div.dataset.panel}: ${text}`;
  const [x, y] = [box.x0 + k * box.cw, box.y0 + q * box.ch];
  Object.assign(div.querySelector(".cell").style, {
    display: "block",
    left: x + "px",
    top: y + "px",
    width: Math.max(box.cw, 3) + "px",
    height: Math.max(box.ch, 3) + "px",
  });
  const tip = div.querySelector(".tip");
  tip.textContent = text;
  Object.assign(tip.style, { display: "block", left: Math.min(x + 12, box.x0 + box.side / 2) + "px", top: y + 12 + "px" });
}

function onClick(div, q) {
  const { map, axis } = div.explorer;
  const row = map.data.subarray(q * map.m, (q + 1) * map.m);
  const top = Math.max(...row.slice(0, q + 1).map(Math.abs)) || 1;
  const spans = axis.labels.slice(0, map.m).map((label, k) => {
    const span = document.createElement("span");
    span.className = "tok" + (k === q ? " query" : "");
    span.textContent = label;
    const weight = Math.abs(row[k]) / top;
    span.style.background = `rgba(${row[k] < 0 ? "31,119,180" : "214,39,40"},${k <= q ? weight : 0})`;
    span.title = `${k}: ${row[k]}`;
    span.dataset.value = String(row[k]);
    return span;
  });
  const heading = document.createElement("div");
  heading.textContent = `${div.dataset.title}, query ${q} ${JSON.stringify(axis.labels[q])}: its row over the prompt`;
  $("textview").replaceChildren(heading, ...spans);
}

function colorScale(zmin, zmax, name, causal) {
  const table = state.index.colors[name];
  return { zmin, zmax, table, lut: packed(table), causal };
}

function panelDiv(index) {
  let div = $("maps").children[index];
  if (!div) {
    div = document.createElement("div");
    div.className = "map";
    $("maps").append(div);
  }
  return div;
}

function cached(cache, key, load) {
  // one request per key: the promise is kept (dropped again if it fails)
  if (!cache.has(key)) cache.set(key, load().catch((error) => (cache.delete(key), Promise.reject(error))));
  return cache.get(key);
}

function drawCurves(curves, head, what) {
  const layer = Number($("layer").value);
  const div = $("curves");
  const marker = [{ type: "line", x0: layer, x1: layer, yref: "paper", y0: 0, y1: 1, line: { color: "#888", dash: "dot" } }];
  if (div.curves === curves && div.dataset.title === what) return Plotly.relayout(div, { shapes: marker }); // a layer switch: the line only
  const layers = curves.values.map((_, l) => l);
  const traces = curves.metrics.map((name, i) => ({
    type: "scatter",
    mode: "lines+markers",
    name,
    x: layers,
    y: curves.values.map((row) => row[i]),
    visible: i < 4 ? true : "legendonly",
  }));
  const existed = div.classList.contains("js-plotly-plot");
  Plotly.react(div, traces, {
    title: { text: `metrics per layer: ${what}, ${head < 0 ? "head mean" : "head " + head}; click a layer`, font: { size: 12 } },
    margin: { l: 40, r: 10, t: 30, b: 40 },
    xaxis: { title: "layer" },
    shapes: marker,
    legend: { font: { size: 9 } },
  }, { displaylogo: false, displayModeBar: false });
  div.curves = curves;
  div.dataset.title = what;
  if (!existed) {
    div.on("plotly_click", (event) => {
      $("layer").value = String(event.points[0].x);
      render();
    });
  }
}

function headBlock(answer) {
  // a head's type (the head table types the scores at heads.threshold) and type scores, and its
  // row of the head table, each as its file has it, or what is absent
  const format = (v) => (typeof v === "number" && !Number.isInteger(v) ? v.toPrecision(4) : String(v ?? "–"));
  const block = document.createElement("div");
  block.className = "head";
  block.dataset.store = answer.store;
  const title = document.createElement("h3");
  title.textContent = `${storeById(answer.store).variant}: layer ${answer.layer}, head ${answer.head}`;
  const types = document.createElement("p");
  types.className = "types";
  const scores = Object.entries(answer.types.row ?? {}).filter(([k]) => !["layer", "head"].includes(k));
  types.textContent = answer.types.row
    ? `head type: ${format(answer.table.row?.head_type)}; ` + scores.map(([k, v]) => `${k} ${format(v)}`).join(", ")
    : answer.types.note;
  block.append(title, types);
  if (!answer.table.row) {
    block.append(Object.assign(document.createElement("p"), { className: "table", textContent: answer.table.note }));
    return block;
  }
  const table = document.createElement("table");
  table.className = "table";
  for (const [column, value] of Object.entries(answer.table.row)) {
    const row = table.insertRow();
    row.insertCell().textContent = column;
    Object.assign(row.insertCell(), { className: "value", textContent: format(value) });
  }
  block.append(table);
  return block;
}

async function render() {
  const started = performance.now();
  const stores = selectedStores();
  const group = $("prompt").value;
  const layer = Number($("layer").value);
  const level = $("level").value;
  const kind = $("kind").value;
  const kindName = $("kind").selectedOptions[0].textContent;
  const rollout = kind.endsWith("rollout"); // computed from the head means, over the layers
  const perHead = level === "token" && !rollout; // word maps and the rollouts: head mean only
  const head = perHead ? Number($("head").value) : state.index.head_mean;
  $("head").disabled = !perHead;
  const diff = $("diff").checked;
  const base = baseStore();
  try {
    // the side panels of the first variant (cosine: one per prompt; curves: one per head and kind), meanwhile
    const first = stores[0];
    const valued = kind.startsWith("value") && first && hasKind(first, "value");
    const curvesKind = valued ? "value" : "weights";
    const side = first
      ? Promise.all([
          cached(state.cosine, first + "|" + group, () =>
            getMap({ store: first, group, level: "cosine", layer: 0, head: state.index.head_mean })
          ),
          cached(state.curves, `${first}|${group}|${head}|${curvesKind}`, () =>
            getJSON(apiURL("/api/metrics", { store: first, group, head, kind: curvesKind }))
          ),
          prompt(first, group),
        ])
      : null;
    side?.catch(() => {}); // reported below, once the maps are drawn
    // a head's row of each variant's head table (a head, not the head mean)
    const heads = head >= 0
      ? Promise.all(stores.map((store) =>
          cached(state.heads, `${store}|${layer}|${head}`, () => getJSON(apiURL("/api/head", { store, layer, head })))
        ))
      : null;
    heads?.catch(() => {});
    const panels = await Promise.all(
      stores.map(async (store) => {
        const minus = diff && base && store !== base ? base : "";
        const lacking = [store, minus].find((id) => id && !hasKind(id, kind));
        if (lacking) return { store, minus, lacking: storeById(lacking) };
        const params = { store, group, level, layer, head, minus, kind };
        const [map, labels] = await Promise.all([getMap(params), prompt(store, group)]);
        return { store, minus, map, axis: labels.axes[level], labels };
      })
    );
    const level_ = level === "token" ? "token" : "word";
    const typed = Number.parseFloat($("cmax").value);
    // the command's colour tops are the attention weights' scale; the rollout (its residual diagonal) gets its own
    const fixed = Number.isFinite(typed) ? typed : rollout ? null : state.index.color_max[level_];
    const drawn = panels.filter((p) => p.map);
    const plain = drawn.filter((p) => !p.minus);
    const top = fixed ?? Math.max(...plain.map((p) => p.map.data.reduce((a, b) => Math.max(a, b), 0)), 1e-9);
    const spread = Math.max(
      ...drawn.filter((p) => p.minus).map((p) => p.map.data.reduce((a, b) => Math.max(a, Math.abs(b)), 0)),
      1e-9
    );
    panels.forEach((p, i) => {
      const div = panelDiv(i);
      const variant = storeById(p.store).variant;
      div.dataset.panel = p.minus ? `${variant}-minus-trained` : variant;
      div.dataset.store = p.store;
      div.dataset.kind = kind;
      const what = p.minus ? `${variant} − trained` : variant;
      const title = `${what}, ${kindName}, layer ${layer}, ${head < 0 ? "head mean" : "head " + head}`;
      if (p.lacking) {
        const reason = p.lacking.kinds_unavailable[kind];
        return notice(div, title, `${kindName} not available for ${p.lacking.id}: ${reason}`);
      }
      const scale = p.minus
        ? colorScale(-spread, spread, "diverging", true)
        : colorScale(0, top, "attention", true);
      heatmap(div, title, p.map, p.axis, scale);
    });
    while ($("maps").children.length > panels.length) $("maps").lastChild.remove();
    $("heads").replaceChildren(...(heads ? (await heads).map(headBlock) : []));
    if (side) {
      const [cosineMap, curves, labels] = await side;
      if ($("cosine").explorer?.map !== cosineMap) {
        $("cosine").dataset.panel = "cosine";
        const cosine = colorScale(-1, 1, "diverging", false);
        heatmap($("cosine"), "input-embedding cosine", cosineMap, labels.axes.cosine, cosine);
      }
      const curvesName = curvesKind === "value" ? "value-weighted" : "attention weights";
      await drawCurves(curves, head, rollout ? `${curvesName} (the rollout has none)` : curvesName);
    }
  } catch (error) {
    showProblem(String(error.message || error));
  }
  state.timings.push(performance.now() - started);
  state.renders += 1;
  $("status").dataset.ready = String(state.renders);
  $("status").textContent = `view ${state.renders}: ${state.timings.at(-1).toFixed(0)} ms`;
}

function step(select, delta) {
  const next = select.selectedIndex + delta;
  if (next >= 0 && next < select.options.length && !select.disabled) {
    select.selectedIndex = next;
    render();
  }
}

async function start() {
  try {
    state.index = await getJSON("/api/index");
  } catch (error) {
    showProblem("cannot reach the explorer server: " + error);
    return;
  }
  state.index.problems.forEach(showProblem);
  if (!state.index.stores.length) {
    $("status").dataset.ready = "none";
    return;
  }
  fill($("model"), unique(state.index.stores.map((s) => s.model)).map((m) => [m, m]));
  $("model").addEventListener("change", onModel);
  $("experiment").addEventListener("change", onExperiment);
  for (const id of ["prompt", "layer", "head", "kind", "level", "diff", "cmax"]) $(id).addEventListener("change", render);
  document.addEventListener("keydown", (event) => {
    if (event.target.tagName === "INPUT") return;
    const moves = { ArrowLeft: ["layer", -1], ArrowRight: ["layer", 1], ArrowUp: ["head", -1], ArrowDown: ["head", 1] };
    if (moves[event.key]) {
      event.preventDefault();
      step($(moves[event.key][0]), moves[event.key][1]);
    }
  });
  onModel();
}

window.explorerState = state;
start();
