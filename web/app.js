/* app.js — memplan's page: the form becomes an options document, {"model": "gpt2-xl", "gpus": 8, ...},
 * the same the Python package takes; memplan_api_run (cli/memplan_api.h) runs `memplan plan --json`
 * and `memplan auto --json` on it inside the WebAssembly module, and the page draws their documents.
 * Pasted or dropped files are written to the module's file system and named by their path, as on the
 * command line. Figures are formatted as the command line's printf formats them. */
"use strict";

const GIB = 1073741824;
const TERMS = ["params", "grads", "comm_buffers", "optimizer", "activations", "transient", "overhead"];
const TERM_HEAD = ["params", "grads", "comm", "optim", "activ", "transnt", "overhead"];
const COLORS = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1"];
const form = document.getElementById("setup");
const $ = (id) => document.getElementById(id);
let planner = null;

/* printf's "%.Nf": JavaScript's toFixed rounds an exact tie away from zero, C to even */
function fixed(x, d) {
  const p = 10 ** d, a = Math.abs(x), t = a * 2 * p;
  let s;
  if (Number.isInteger(t) && t % 2 === 1) {
    let n = (t - 1) / 2;
    if (n % 2 === 1) n += 1;
    s = (n / p).toFixed(d);
  } else s = a.toFixed(d);
  return (x < 0 || Object.is(x, -0) ? "-" : "") + s;
}
const gib = (b, d = 2) => fixed(b / GIB, d);

/* One run of the front end: {rc, out, err, msg}; out and err are its standard output and error. */
function run(command, options, json) {
  const M = planner.module, sink = planner.sink;
  sink.out = []; sink.err = [];
  const rc = M.ccall("memplan_api_run", "number", ["string", "string", "number", "number", "number"],
                     [command, JSON.stringify(options), json ? 1 : 0, planner.msg, 8192]);
  const msg = M.UTF8ToString(planner.msg);
  return {rc, out: sink.out.join("\n") + "\n", err: sink.err, msg};
}

function fail(r) {   /* the one line the command line prints, without "memplan: " */
  if (r.msg) return r.msg;
  const last = r.err.filter((l) => l.trim()).pop() || "failed";
  return last.replace(/^memplan: /, "");
}

/* the form's setup: its fields in the URL's order of keys, empty ones left out */
const FIELDS = ["model", "seq", "gpus", "gpus_per_node", "gpu", "gpu_mem", "batch", "grad_accum", "precision", "act_ckpt",
                "strategy", "offload", "lora", "quant_base", "tp", "pp", "microbatches"];
const files = {model_text: null, config_text: null};   /* dropped files' names */

function fileName(field, text) {
  if (files[field]) return files[field].replace(/[^A-Za-z0-9._-]/g, "_");
  return field === "model_text" ? "model.json" : "config";
}

function optionsDoc() {
  const doc = {};
  const mtext = form.model_text.value.trim(), ctext = form.config_text.value.trim();
  for (const f of FIELDS) {
    const v = form.elements[f].value.trim();
    if (f === "model" && mtext) continue;   /* a pasted model replaces the zoo's */
    if (v !== "") doc[f] = /^(seq|gpus|gpus_per_node|batch|grad_accum|lora|tp|pp|microbatches)$/.test(f) && /^\d+$/.test(v) ? Number(v) : v;
  }
  if (mtext) {
    const name = fileName("model_text");
    planner.module.FS.writeFile(name, mtext);
    doc.model = name;
  }
  if (ctext) {
    const name = fileName("config_text");
    planner.module.FS.writeFile(name, ctext);
    doc.config = name;
  }
  return doc;
}

/* the field an error line names (its first --flag the form has), else none */
function fieldOf(msg) {
  for (const m of msg.matchAll(/--([a-z0-9-]+)/g)) {
    const f = m[1].replace(/-/g, "_");
    if (f === "model" && form.model_text.value.trim()) return "model_text";
    if (f === "config") return "config_text";
    if (form.elements[f]) return f;
  }
  if (/^(.*\.json|model\.json|config)[:' ]/.test(msg)) return msg.startsWith(fileName("config_text")) ? "config_text" : "model_text";
  return null;
}

function showError(msg) {
  for (const e of form.querySelectorAll(".err")) e.textContent = "";
  for (const l of form.querySelectorAll("label.bad")) l.classList.remove("bad");
  $("error").hidden = true;
  if (!msg) return;
  const f = fieldOf(msg);
  if (f) {
    const label = form.elements[f].closest("label");
    label.classList.add("bad");
    label.querySelector(".err").textContent = msg;
  } else {
    $("error").textContent = msg;
    $("error").hidden = false;
  }
}

function cell(text, cls, raw) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  if (raw !== undefined) td.dataset.v = String(raw);
  return td;
}

function table(el, head, units, rows) {
  el.textContent = "";
  for (const h of [head, units]) {
    const tr = el.insertRow();
    for (const x of h) { const th = document.createElement("th"); th.textContent = x; tr.appendChild(th); }
  }
  for (const r of rows) { const tr = el.insertRow(); for (const c of r.cells) tr.appendChild(c); if (r.cls) tr.className = r.cls; }
}

function drawMemory(doc) {
  const rec = doc.recommendation && doc.recommendation.strategy;
  table($("memory"), ["strategy", ...TERM_HEAD, "peak", "fits", "headroom", "max_batch", "host", "peak_at"],
        ["-", ...TERMS.map(() => "GiB"), "GiB", "-", "GiB", "samples", "GiB/node", "-"],
        doc.strategies.map((s) => ({
          cls: s.name === rec ? "rec" : "",
          cells: [cell(s.name, "name"),
                  ...TERMS.map((t) => t === "activations" && !s.activations_known ? cell("unknown", t) : cell(gib(s.memory[t]), t, s.memory[t])),
                  cell(gib(s.memory.peak), "peak", s.memory.peak),
                  cell(s.fits ? "yes" : !s.gpu_fits ? "OOM" : "host", s.fits ? "fits" : "fits oom"),
                  cell(gib(s.headroom_bytes), "headroom", s.headroom_bytes),
                  cell(s.activations_known ? String(s.max_micro_batch) : s.max_micro_batch > 0 ? "unknown" : "0", "max_batch", s.max_micro_batch),
                  cell(gib(s.host_bytes_per_node), "host", s.host_bytes_per_node),
                  cell(s.peak_at, "text")]}))); 
  const r = doc.recommendation;
  $("recommendation").title = r ? r.reason : "";   /* the line itself, a command to paste, is the text's */
  const c = doc.cluster, m = doc.model, t = doc.train;
  $("setup-line").textContent = `${m.name} (${m.params.toLocaleString("en-US")} parameters, ${m.arch}) on ${c.gpus} x ${c.gpu} ` +
    `(${gib(c.gpu_mem_bytes)} GiB each), micro-batch ${t.micro_batch}, seq ${t.seq}, grad-accum ${t.grad_accum}, ${t.precision}, act-ckpt ${t.act_ckpt}`;
}

function drawComm(doc) {
  const rows = [];
  for (const s of doc.strategies) {
    if (!s.comm.collectives.length && !(s.comm.host_copies || []).length)
      rows.push({cells: [cell(s.name), cell("none (one rank)", "text"), cell(""), cell(""), cell(""), cell(""), cell(""), cell(""), cell("")]});
    for (const x of s.comm.collectives)
      rows.push({cells: [cell(s.name), cell(x.op, "text"), cell(x.phase, "text"), cell(fixed(x.count, 0), "count", x.count),
                         cell(gib(x.payload_bytes, 3), "payload", x.payload_bytes), cell(gib(x.wire_bytes_per_gpu, 3), "wire", x.wire_bytes_per_gpu),
                         cell(String(x.ranks), "ranks", x.ranks), cell(fixed(x.seconds * 1e3, 2), "ms", x.seconds), cell(x.what, "text")]});
    for (const x of s.comm.host_copies || [])
      rows.push({cells: [cell(s.name), cell(x.op, "text"), cell(x.phase, "text"), cell("-"), cell(gib(x.bytes_per_gpu, 3), "payload", x.bytes_per_gpu),
                         cell("-"), cell("host"), cell(fixed(x.seconds * 1e3, 2), "ms", x.seconds), cell(x.what, "text")]});
  }
  table($("comm"), ["strategy", "collective", "phase", "count", "payload", "wire", "ranks", "time", "what"],
        ["-", "-", "-", "calls", "GiB", "GiB", "-", "ms", "-"], rows);
}

function drawStep(doc) {
  table($("step"), ["strategy", "compute", "comm", "exposed", "step", "per_gpu", "all_gpus", "comm/GPU"],
        ["-", "ms", "ms", "ms", "ms", "tokens/s", "tokens/s", "GiB"],
        doc.strategies.map((s) => {
          const t = s.time, known = s.activations_known;
          return {cells: [cell(s.name), cell(fixed(t.compute_s * 1e3, 2), "compute", t.compute_s), cell(fixed(t.comm_s * 1e3, 2), "comm", t.comm_s),
                          cell(fixed(t.exposed_comm_s * 1e3, 2), "exposed", t.exposed_comm_s), cell(fixed(t.step_s * 1e3, 2), "step", t.step_s),
                          cell(known ? fixed(t.tokens_per_s / doc.cluster.gpus, 0) : "unknown", "per_gpu", t.tokens_per_s / doc.cluster.gpus),
                          cell(known ? fixed(t.tokens_per_s, 0) : "unknown", "all_gpus", t.tokens_per_s),
                          cell(gib(s.comm.bytes_per_gpu, 3), "wire", s.comm.bytes_per_gpu)]};
        }));
}

function drawAuto(a) {
  if (!a) { $("auto-pick").textContent = ""; $("auto-explain").textContent = ""; return; }
  const r = a.recommendation, x = a.auto;
  $("auto-pick").textContent = x.found
    ? `${r.strategy} --offload ${r.offload} --precision ${r.precision} --batch ${r.micro_batch} --grad-accum ${r.grad_accum} --act-ckpt ${r.act_ckpt}`
    : `nothing fits: ${x.would_fit_with || "see below"}`;
  $("auto-explain").textContent = x.explain;
}

/* SVG: the breakdown at each strategy's peak (stacked bars, the capacity dashed) and the memory over
   the simulated step (the trace's counters, summed), as --plot draws them */
function drawChart(doc, trace) {
  const W = 980, H = 300, pad = 44, half = W / 2, cap = doc.cluster.gpu_mem_bytes / GIB;
  const rows = doc.strategies, top = 1.08 * Math.max(cap, ...rows.map((s) => s.memory.peak / GIB));
  const y = (v) => H - pad + 10 - (v / top) * (H - pad - 20);
  const svg = [`<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H + 30}" role="img" aria-label="memory per GPU">`];
  const axis = (x0, x1, label) => {
    svg.push(`<line x1="${x0}" y1="${y(0)}" x2="${x1}" y2="${y(0)}" stroke="#888"/>`);
    for (let k = 0; k <= 4; k++) {
      const v = (top * k) / 4;
      svg.push(`<text x="${x0 - 4}" y="${y(v) + 4}" text-anchor="end">${v.toFixed(0)}</text>`);
    }
    svg.push(`<text x="${x0}" y="14">${label}</text>`);
  };
  axis(pad, half - 20, "GiB at each strategy's peak (red: capacity)");
  const bw = Math.min(48, (half - pad - 30) / rows.length * 0.7);
  rows.forEach((s, i) => {
    const x = pad + 10 + i * ((half - pad - 30) / rows.length);
    let acc = 0;
    TERMS.forEach((t, k) => {
      const v = s.memory[t] / GIB;
      svg.push(`<rect class="bar" data-strategy="${s.name}" data-term="${t}" x="${x}" y="${y(acc + v)}" width="${bw}" height="${y(acc) - y(acc + v)}" fill="${COLORS[k]}"><title>${s.name} ${t} ${gib(s.memory[t])} GiB</title></rect>`);
      acc += v;
    });
    svg.push(`<text x="${x + bw / 2}" y="${H - pad + 22}" text-anchor="end" transform="rotate(-30 ${x + bw / 2} ${H - pad + 22})">${s.name}</text>`);
  });
  svg.push(`<line x1="${pad}" y1="${y(cap)}" x2="${half - 20}" y2="${y(cap)}" stroke="red" stroke-dasharray="6 4" stroke-width="2"/>`);
  TERMS.forEach((t, k) => svg.push(`<rect x="${pad + k * 62}" y="${H + 8}" width="10" height="10" fill="${COLORS[k]}"/><text x="${pad + 14 + k * 62}" y="${H + 17}">${TERM_HEAD[k]}</text>`));
  const x0 = half + pad, x1 = W - 10;
  axis(x0, x1, "memory over one step (simulated), GiB against ms");
  const names = {};
  for (const e of trace) if (e.ph === "M" && e.name === "process_name") names[e.pid] = e.args.name.split(" ")[0];
  const curves = {};
  for (const e of trace) if (e.ph === "C") (curves[names[e.pid]] = curves[names[e.pid]] || []).push([e.ts, Object.values(e.args).reduce((a, b) => a + b, 0) / GIB]);
  const tmax = Math.max(1e-9, ...Object.values(curves).flat().map((p) => p[0]));
  Object.entries(curves).forEach(([name, pts], i) => {
    let d = "";
    pts.forEach(([t, v], k) => { const px = x0 + (t / tmax) * (x1 - x0); d += (k ? `H${px.toFixed(1)}V` : `M${px.toFixed(1)},`) + y(v).toFixed(1); });
    svg.push(`<path class="curve" data-strategy="${name}" d="${d}" fill="none" stroke="${COLORS[i % COLORS.length]}" stroke-width="2"><title>${name}</title></path>`);
    svg.push(`<text x="${x1 - 4}" y="${30 + i * 14}" text-anchor="end" fill="${COLORS[i % COLORS.length]}">${name}</text>`);
  });
  svg.push(`<line x1="${x0}" y1="${y(cap)}" x2="${x1}" y2="${y(cap)}" stroke="red" stroke-dasharray="6 4" stroke-width="2"/>`);
  svg.push(`<text x="${x1}" y="${H - pad + 26}" text-anchor="end">${fixed(tmax / 1e3, 2)} ms</text></svg>`);
  $("chart").innerHTML = svg.join("");
}

/* the setup in the address: #model=gpt2-xl&gpus=8 */
function toURL(doc) {
  const q = new URLSearchParams();
  for (const f of FIELDS) if (form.elements[f].value.trim()) q.set(f, form.elements[f].value.trim());
  lastHash = q.toString();
  history.replaceState(null, "", "#" + lastHash);
}

function fromURL() {
  const q = new URLSearchParams(location.hash.slice(1));
  for (const f of FIELDS) form.elements[f].value = q.has(f) ? q.get(f) : "";
}

/* a link to another setup opened in this tab: the address is the setup */
window.addEventListener("hashchange", () => {
  if (!planner || location.hash.slice(1) === lastHash) return;
  fromURL();
  update();
});
let lastHash = "";

function update() {
  const doc = optionsDoc();
  toURL(doc);
  const r = run("plan", Object.assign({trace: "/tmp/trace.json"}, doc), true);
  if (r.rc !== 0) {
    showError(fail(r));
    $("plan").hidden = true;
    $("status").textContent = "";
    document.body.dataset.state = "ready";
    return;
  }
  showError(null);
  const plan = JSON.parse(r.out);
  const trace = JSON.parse(planner.module.FS.readFile("/tmp/trace.json", {encoding: "utf8"})).traceEvents;
  drawMemory(plan);
  drawComm(plan);
  drawStep(plan);
  drawChart(plan, trace);
  const a = run("auto", doc, true);
  drawAuto(a.rc === 0 ? JSON.parse(a.out) : null);
  if (a.rc !== 0) $("auto-explain").textContent = fail(a);
  const text = run("plan", doc, false).out;
  $("table-text").textContent = text;
  $("recommendation").textContent = text.split("\n").find((l) => l.startsWith("recommendation: ")) || "";
  $("plan").hidden = false;
  $("status").textContent = r.err.filter((l) => l.trim() && !l.startsWith("# wrote")).join("\n");
  document.body.dataset.state = "ready";
}

function fillLists() {
  const models = JSON.parse(run("models", {}, true).out), zoo = $("zoo");
  for (const m of models) { const o = document.createElement("option"); o.value = m.name; o.label = `${m.family}${m.hub_id ? " · " + m.hub_id : ""}`; zoo.appendChild(o); }
  const gpus = JSON.parse(run("gpus", {}, true).out);
  for (const g of gpus) { const o = document.createElement("option"); o.value = g.name; o.textContent = `${g.name} (${gib(g.mem_bytes)} GiB)`; form.gpu.appendChild(o); }
}

function dropInto(field) {
  const label = form.elements[field].closest("label");
  label.addEventListener("dragover", (e) => { e.preventDefault(); label.classList.add("over"); });
  label.addEventListener("dragleave", () => label.classList.remove("over"));
  label.addEventListener("drop", (e) => {
    e.preventDefault();
    label.classList.remove("over");
    const f = e.dataTransfer.files[0];
    if (!f) return;
    f.text().then((t) => { files[field] = f.name; form.elements[field].value = t; update(); });
  });
  form.elements[field].addEventListener("input", () => { files[field] = null; });
}

let timer = 0;
form.addEventListener("input", () => { clearTimeout(timer); timer = setTimeout(update, 250); });
form.addEventListener("change", () => { clearTimeout(timer); update(); });
dropInto("model_text");
dropInto("config_text");

const sink = {out: [], err: []};
MemplanModule({print: (t) => sink.out.push(t), printErr: (t) => sink.err.push(t)}).then((M) => {
  planner = {module: M, sink, msg: M._malloc(8192)};
  M.FS.mkdirTree("/tmp");
  $("version").textContent = M.ccall("memplan_api_version", "string", [], []);
  fillLists();
  fromURL();
  if (!form.model.value && !form.model_text.value) form.model.value = "gpt2-xl";
  if (!form.gpus.value) form.gpus.value = "8";
  update();
});
