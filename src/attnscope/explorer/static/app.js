// attnscope explorer: fetches one map per panel from the server (/api/map) and draws it with plotly.js.
"use strict";

const $ = (id) => document.getElementById(id);
const state = { index: null, prompts: new Map(), cosine: new Map(), renders: 0, timings: [] };
const BOUNDARY = { color: "#222", width: 1.2 };

async function getJSON(url) {
  const response = await fetch(url);
  if (!response.ok) throw new Error(await response.text());
  return response.json();
}

async function getMap(params) {
  const response = await fetch("/api/map?" + new URLSearchParams(params));
  if (!response.ok) throw new Error(await response.text());
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

async function prompt(store, group) {
  const key = store + "|" + group;
  if (!state.prompts.has(key)) state.prompts.set(key, await getJSON(`/api/prompt?store=${store}&group=${group}`));
  return state.prompts.get(key);
}

function rows(map, causal) {
  const z = [];
  for (let q = 0; q < map.n; q++) {
    const row = Array.from(map.data.subarray(q * map.m, (q + 1) * map.m));
    if (causal) for (let k = q + 1; k < map.m; k++) row[k] = null; // the non-causal upper triangle: grey
    z.push(row);
  }
  return z;
}

function boundaryShapes(axis, n) {
  return axis.boundaries
    .filter((p) => p < n)
    .flatMap((p) => [
      { type: "line", x0: p - 0.5, x1: p - 0.5, y0: -0.5, y1: n - 0.5, line: BOUNDARY },
      { type: "line", y0: p - 0.5, y1: p - 0.5, x0: -0.5, x1: n - 0.5, line: BOUNDARY },
    ]);
}

function heatmap(div, title, map, axis, scale) {
  const n = map.n;
  const ticks = { tickvals: [...Array(n).keys()], ticktext: axis.labels.slice(0, n), tickfont: { size: 8 } };
  const trace = {
    type: "heatmap",
    z: rows(map, scale.causal),
    zmin: scale.zmin,
    zmax: scale.zmax,
    colorscale: scale.colorscale,
    hovertemplate: "%{z:.4g}<extra></extra>",
  };
  const layout = {
    title: { text: title, font: { size: 12 } },
    margin: { l: 80, r: 10, t: 30, b: 80 },
    xaxis: { ...ticks, title: "key", constrain: "domain" },
    yaxis: { ...ticks, title: "query", autorange: "reversed", scaleanchor: "x" },
    plot_bgcolor: "#bbb",
    shapes: boundaryShapes(axis, n),
  };
  const existed = div.classList.contains("js-plotly-plot");
  if (existed) Plotly.Fx.unhover(div); // a label of the previous view would stay on the new one
  Plotly.react(div, [trace], layout, { displaylogo: false, responsive: false });
  if (!existed) {
    div.on("plotly_hover", (event) => onHover(div, event));
    div.on("plotly_click", (event) => onClick(div, event));
  }
  div.explorer = { map, axis };
}

function onHover(div, event) {
  const point = event.points[0];
  const [q, k] = point.pointNumber;
  const { axis } = div.explorer;
  Object.assign($("hover").dataset, {
    panel: div.dataset.panel,
    query: q,
    key: k,
    value: String(point.z),
    queryLabel: axis.labels[q],
    keyLabel: axis.labels[k],
  });
  $("hover").textContent = `${div.dataset.panel}: query ${q} ${JSON.stringify(axis.labels[q])} -> key ${k} ${JSON.stringify(axis.labels[k])}: ${point.z}`;
}

function onClick(div, event) {
  const q = event.points[0].pointNumber[0];
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
  heading.textContent = `${div.dataset.panel}, query ${q} ${JSON.stringify(axis.labels[q])}: its attention over the prompt`;
  $("textview").replaceChildren(heading, ...spans);
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

async function renderCurves(store, group, head) {
  const curves = await getJSON(`/api/metrics?store=${store}&group=${group}&head=${head}`);
  const layers = curves.values.map((_, l) => l);
  const traces = curves.metrics.map((name, i) => ({
    type: "scatter",
    mode: "lines+markers",
    name,
    x: layers,
    y: curves.values.map((row) => row[i]),
    visible: i < 4 ? true : "legendonly",
  }));
  const layer = Number($("layer").value);
  const div = $("curves");
  const existed = div.classList.contains("js-plotly-plot");
  Plotly.react(div, traces, {
    title: { text: `metrics per layer (${head < 0 ? "head mean" : "head " + head}); click a layer`, font: { size: 12 } },
    margin: { l: 40, r: 10, t: 30, b: 40 },
    xaxis: { title: "layer" },
    shapes: [{ type: "line", x0: layer, x1: layer, yref: "paper", y0: 0, y1: 1, line: { color: "#888", dash: "dot" } }],
    legend: { font: { size: 9 } },
  });
  if (!existed) {
    div.on("plotly_click", (event) => {
      $("layer").value = String(event.points[0].x);
      render();
    });
  }
}

async function render() {
  const started = performance.now();
  const stores = selectedStores();
  const group = $("prompt").value;
  const layer = Number($("layer").value);
  const level = $("level").value;
  const head = level === "token" ? Number($("head").value) : state.index.head_mean;
  $("head").disabled = level !== "token";
  const diff = $("diff").checked;
  const base = baseStore();
  try {
    const panels = await Promise.all(
      stores.map(async (store) => {
        const minus = diff && base && store !== base ? base : "";
        const params = { store, group, level, layer, head, minus };
        const [map, labels] = await Promise.all([getMap(params), prompt(store, group)]);
        return { store, minus, map, axis: labels.axes[level], labels };
      })
    );
    const level_ = level === "token" ? "token" : "word";
    const typed = Number.parseFloat($("cmax").value);
    const fixed = Number.isFinite(typed) ? typed : state.index.color_max[level_];
    const plain = panels.filter((p) => !p.minus);
    const top = fixed ?? Math.max(...plain.map((p) => p.map.data.reduce((a, b) => Math.max(a, b), 0)), 1e-9);
    const spread = Math.max(
      ...panels.filter((p) => p.minus).map((p) => p.map.data.reduce((a, b) => Math.max(a, Math.abs(b)), 0)),
      1e-9
    );
    panels.forEach((p, i) => {
      const div = panelDiv(i);
      const variant = storeById(p.store).variant;
      div.dataset.panel = p.minus ? `${variant}-minus-trained` : variant;
      div.dataset.store = p.store;
      const scale = p.minus
        ? { zmin: -spread, zmax: spread, colorscale: "RdBu", causal: true }
        : { zmin: 0, zmax: top, colorscale: "Viridis", causal: true };
      const what = p.minus ? `${variant} − trained` : variant;
      heatmap(div, `${what}, layer ${layer}, ${head < 0 ? "head mean" : "head " + head}`, p.map, p.axis, scale);
    });
    while ($("maps").children.length > panels.length) {
      Plotly.purge($("maps").lastChild);
      $("maps").lastChild.remove();
    }
    if (stores.length) {
      const key = stores[0] + "|" + group;
      if (!state.cosine.has(key)) {
        state.cosine.set(key, await getMap({ store: stores[0], group, level: "cosine", layer: 0, head: state.index.head_mean }));
      }
      const labels = await prompt(stores[0], group);
      $("cosine").dataset.panel = "cosine";
      heatmap($("cosine"), "input-embedding cosine", state.cosine.get(key), labels.axes.cosine, {
        zmin: -1, zmax: 1, colorscale: "RdBu", causal: false,
      });
      await renderCurves(stores[0], group, head);
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
  for (const id of ["prompt", "layer", "head", "level", "diff", "cmax"]) $(id).addEventListener("change", render);
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
