// Pure DOM builders. Text from the data (run names, tags, types, ops, hints)
// only ever goes in through textContent / text nodes, never as markup, and
// through `inert` (bidirectional controls shown as escapes, never obeyed).

import { sparkline, SERIES_COLORS } from "./chart.js";
import {
  formatAmount, formatBytes, formatCount, formatPercent, formatRate, formatStep, inert, verdictLabel,
} from "./format.js";

/** Create an element: h("div", {className, testid, data: {...}, attrs: {...}, on: {...}}, ...children). */
export function h(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  const { className, testid, data, attrs, on, text, title } = props;
  if (className) node.className = className;
  if (testid) node.setAttribute("data-testid", testid);
  if (title) node.title = inert(title);
  if (data) for (const [k, v] of Object.entries(data)) node.dataset[k] = String(v);
  if (attrs) for (const [k, v] of Object.entries(attrs)) if (v !== undefined && v !== null && v !== false) node.setAttribute(k, v === true ? "" : String(v));
  if (on) for (const [k, v] of Object.entries(on)) node.addEventListener(k, v);
  if (text !== undefined && text !== null) node.textContent = inert(text);
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.appendChild(typeof child === "string" || typeof child === "number" ? document.createTextNode(inert(child)) : child);
  }
  return node;
}

/** Text where `code` spans become <code> elements (still text nodes inside). */
export function richText(text, className) {
  const node = h("span", { className });
  String(text || "").split("`").forEach((part, index) => {
    if (!part) return;
    node.appendChild(index % 2 ? h("code", { text: part }) : document.createTextNode(inert(part)));
  });
  return node;
}

/** Text with line-break opportunities after "/" and "." (a <wbr>, so the text itself is unchanged). */
export function breakable(text, props = {}) {
  const parts = String(text ?? "").split(/(?<=[/.:])/);
  const children = [];
  parts.forEach((part, index) => {
    if (index) children.push(document.createElement("wbr"));
    children.push(part);
  });
  return h("span", props, children);
}

export function verdictBadge(verdict, { small = false } = {}) {
  return h("span", {
    className: `badge badge-${verdict || "unknown"}${small ? " badge-small" : ""}`,
    testid: "verdict-badge",
    data: { verdict: verdict || "unknown" },
    text: verdictLabel(verdict),
  });
}

export function loading(text = "Loading…") {
  return h("div", { className: "state state-loading", testid: "loading" },
    h("span", { className: "spinner", attrs: { "aria-hidden": "true" } }), h("span", { text }));
}

export function errorState(message, detail, onRetry) {
  return h("div", { className: "state state-error", testid: "error", attrs: { role: "alert" } },
    h("div", { className: "state-title", text: message }),
    detail ? h("div", { className: "state-detail", text: detail }) : null,
    onRetry ? h("button", { className: "button", text: "Retry", on: { click: onRetry } }) : null);
}

/** What to do when the logdir holds no tb-leak series yet. */
export function emptyState() {
  const code = [
    "import tb_leak_plugin as tbleak",
    "",
    'monitor = tbleak.Monitor("logs/my_run")   # the run directory',
    "for step in range(num_steps):",
    "    train_step()",
    "    monitor.sample(step)                   # cheap: stays within 1% of step time",
    "monitor.close()",
  ].join("\n");
  return h("div", { className: "empty", testid: "empty-state" },
    h("h2", { text: "No tb-leak data in this logdir yet" }),
    h("p", { text: "The Leak tab shows memory series written by tb-leak's Monitor: process memory, Python heap, " +
      "TensorFlow allocator, live tensors and live objects by type. Add a Monitor to your training loop:" }),
    h("pre", { className: "code", text: code }),
    h("p", {},
      "Keras: pass ", h("code", { text: "tbleak.keras.LeakCallback(logdir)" }),
      " to ", h("code", { text: "model.fit(callbacks=[...])" }), ". ",
      "To find the op that keeps memory, record a profiler trace: ",
      h("code", { text: "Monitor(logdir, profile_steps=(100, 110))" }), "."),
    h("p", { className: "muted", text: "Then reload TensorBoard. From a terminal or CI: tb-leak analyze LOGDIR" }));
}

/** The sidebar list of runs, leaks first. */
export function runList(runs, { selected, compared, onSelect, onToggleCompare }) {
  const list = h("ul", { className: "run-list", testid: "run-list", attrs: { role: "listbox" } });
  for (const run of runs) {
    const isSelected = run.run === selected;
    const checkbox = h("input", {
      className: "compare-toggle",
      attrs: { type: "checkbox", "aria-label": "compare" },
      title: "Add to the comparison",
      on: { change: (event) => onToggleCompare(run.run, event.target.checked), click: (e) => e.stopPropagation() },
    });
    checkbox.checked = compared.has(run.run);
    const growth = run.growth_bytes_per_step;
    const item = h("li", {
      className: `run-item${isSelected ? " selected" : ""}`,
      testid: "run-item",
      data: { run: run.run, verdict: run.verdict },
      attrs: { role: "option", "aria-selected": isSelected ? "true" : "false", tabindex: "0" },
      title: run.reason,
      on: {
        click: () => onSelect(run.run),
        keydown: (event) => { if (event.key === "Enter" || event.key === " ") { event.preventDefault(); onSelect(run.run); } },
      },
    },
    checkbox,
    h("div", { className: "run-text" },
      h("div", { className: "run-name", testid: "run-name", text: run.run }),
      h("div", { className: "run-meta" },
        verdictBadge(run.verdict, { small: true }),
        h("span", { className: "run-growth", text: growth === null || growth === undefined ? "" : `${formatBytes(growth, { signed: true })}/step` }))));
    list.appendChild(item);
  }
  return list;
}

/** The selected run's verdict, evidence and growth. */
export function runSummary(report) {
  const growth = report.growth_bytes_per_step;
  const perHour = report.growth_bytes_per_hour;
  const facts = [
    ["confidence", formatPercent(report.confidence)],
    ["memory growth", growth === null ? "–" : `${formatBytes(growth, { signed: true })}/step`],
    ["per hour", perHour === null ? "–" : `${formatBytes(perHour, { signed: true })}/h`],
    ["samples", formatCount(report.samples)],
  ];
  return h("section", { className: "card summary", testid: "run-summary", data: { verdict: report.verdict } },
    h("div", { className: "summary-head" },
      h("h1", { className: "summary-run", testid: "summary-run", text: report.run }),
      verdictBadge(report.verdict)),
    h("p", { className: "summary-reason", text: report.reason }),
    h("dl", { className: "facts" }, facts.map(([label, value]) => h("div", { className: "fact" },
      h("dt", { text: label }), h("dd", { text: value })))),
    report.primary_tag ? h("div", { className: "muted small", text: `growth measured on ${report.primary_tag}` }) : null);
}

export function hintsView(hints) {
  if (!hints || !hints.length) return null;
  return h("section", { className: "hints", testid: "hints" },
    hints.map((hint) => h("article", { className: "card hint", testid: "hint", data: { key: hint.key } },
      h("h3", { text: hint.title }),
      h("p", {}, richText(hint.text)),
      h("p", { className: "fix" }, h("strong", { text: "Fix: " }), richText(hint.fix)))));
}

/** Known leaks of TensorFlow/Keras among the culprits: what the library keeps and the workaround. */
export function libraryLeaksView(known) {
  if (!known || !known.length) return null;
  return h("section", { className: "hints", testid: "library-leaks" },
    known.map((entry) => h("article", { className: "card hint", testid: "library-leak", data: { key: entry.key } },
      h("h3", {}, h("span", { className: "badge badge-small badge-library", text: "library leak" }), " ", entry.title),
      h("p", { text: entry.what }),
      h("p", { className: "fix" }, h("strong", { text: "Workaround: " }), entry.workaround),
      h("p", { className: "muted small", text: `Known in ${entry.versions}. Reported: ${(entry.issues || []).join(", ")}` }))));
}

const KIND_LABELS = {
  op: "op", retracing: "tf.function", object_type: "object type", tensors: "tensors", series: "series", gc: "gc",
  container: "container", runtime: "runtime", graph: "graph",
};

/** The leak trace under a culprit: each path from its root to the direct holder, as a chain of hops (text only). */
export function heldByView(culprit) {
  const details = culprit && typeof culprit.details === "object" && culprit.details ? culprit.details : {};
  const held = Array.isArray(details.held_by) ? details.held_by : [];
  const also = Array.isArray(details.also) ? details.also : [];
  if (!held.length && !also.length) return null;
  const target = culprit.kind === "object_type" ? String(culprit.name).split(".").pop() : null;
  const trace = details.trace && typeof details.trace === "object" ? details.trace : null;
  const items = [];
  if (trace && Number.isFinite(trace.live)) {
    let text = `${formatCount(trace.live)} live`;
    if (Number.isFinite(trace.new) && trace.new_since_step !== null && trace.new_since_step !== undefined) {
      text += ` (${formatCount(trace.new)} new since step ${formatStep(trace.new_since_step)})`;
    }
    items.push(h("div", { className: "trace-live", testid: "trace-live", text }));
  }
  for (const entry of held.slice(0, 5)) {
    if (!entry || !Array.isArray(entry.path)) continue;
    const hops = entry.path.map(String).concat(target ? [target] : []);
    const chain = h("div", { className: "held-by", testid: "held-by" }, h("span", { className: "held-label", text: "held by" }));
    hops.forEach((hop, index) => {
      if (index) chain.appendChild(h("span", { className: "hop-arrow", attrs: { "aria-hidden": "true" }, text: "→" }));
      chain.appendChild(h("span", { className: index === 0 ? "hop hop-root" : "hop", testid: "hop", text: hop }));
    });
    if (culprit.kind !== "container" && Number.isFinite(entry.instances)) {
      const of = Number.isFinite(entry.of) ? ` of ${formatCount(entry.of)}` : "";
      chain.appendChild(h("span", { className: "hop-count", testid: "hop-count", text: `${formatCount(entry.instances)}${of}` }));
    }
    items.push(chain);
  }
  if (also.length) {
    items.push(h("div", { className: "held-also", testid: "held-also",
      text: "also held there: " + also.map((o) => `${KIND_LABELS[o.kind] || o.kind} ${o.name}`).join(", ") }));
  }
  return h("div", { className: "trace-chain", testid: "trace-chain" }, items);
}

export function culpritsView(culprits) {
  if (!culprits || !culprits.length) return null;
  const rows = [];
  for (const c of culprits.slice(0, 10)) {
    rows.push(h("tr", { testid: "culprit-row", data: { kind: c.kind } },
      h("td", {}, h("span", { className: "kind", text: KIND_LABELS[c.kind] || c.kind }),
        c.details && c.details.library_leak
          ? h("span", { className: "badge badge-small badge-library", testid: "library-badge", text: "library leak" })
          : null),
      h("td", { className: "name-cell", title: c.evidence }, breakable(c.name)),
      h("td", { className: "num", text: formatRate(c.growth_per_step, c.unit) }),
      h("td", { className: "num", text: formatPercent(c.confidence) }),
      h("td", { className: "evidence", text: c.evidence })));
    const held = heldByView(c);
    if (held) rows.push(h("tr", { className: "trace-row", testid: "trace-row" }, h("td", { attrs: { colspan: 5 } }, held)));
  }
  return table("culprits-table", ["kind", "what", "growth", "confidence", "evidence"], rows, [2, 3]);
}

/** Leaks the watch traced while the run trained that its end does not show (let go, or stopped growing). */
export function tracedEarlierView(entries) {
  if (!Array.isArray(entries) || !entries.length) return null;
  return h("section", { className: "hints", testid: "traced-earlier" },
    entries.slice(0, 5).map((entry) => {
      const culprit = { kind: entry.kind, name: entry.name, details: { held_by: entry.held_by } };
      return h("article", { className: "card hint", testid: "traced-earlier-entry" },
        h("h3", { text: `Traced while it trained: ${KIND_LABELS[entry.kind] || entry.kind} ${entry.name}` }),
        h("p", { className: "muted small",
          text: `At step ${formatStep(entry.step)}${Number.isFinite(entry.live) ? `, ${formatCount(entry.live)} live` : ""}; ` +
            "not growing at the end of the data (let go, or stopped growing)." }),
        heldByView(culprit));
    }));
}

function table(testid, headers, rows, numericColumns = []) {
  return h("div", { className: "table-wrap" },
    h("table", { className: "table", testid },
      h("thead", {}, h("tr", {}, headers.map((name, i) => h("th", { className: numericColumns.includes(i) ? "num" : "", text: name })))),
      h("tbody", {}, rows)));
}

/** A section with a title, an optional note and a body to fill later. */
export function section(title, note, testid) {
  const body = h("div", { className: "section-body" });
  const element = h("section", { className: "section", testid },
    h("div", { className: "section-head" }, h("h2", { text: title }), note ? h("span", { className: "muted small", text: note }) : null),
    body);
  return { element, body };
}

/** A chart card: title (tag), verdict and rate; `host` receives the chart. */
export function chartCard(series) {
  const host = h("div", { className: "chart-host" }, loading("Loading series…"));
  const card = h("article", { className: "card chart-card", testid: "chart-card", data: { tag: series.tag } },
    h("div", { className: "chart-head" },
      h("div", { className: "chart-title", text: seriesTitle(series), title: series.tag }),
      series.verdict && series.verdict !== "not_assessed" ? verdictBadge(series.verdict, { small: true }) : null),
    h("div", { className: "chart-sub muted small" },
      h("span", { text: series.tag }),
      series.slope_per_step !== undefined && series.slope_per_step !== null
        ? h("span", { text: ` · ${formatRate(series.slope_per_step, series.unit)}` }) : null),
    host);
  return { card, host };
}

const MEASURE_TITLES = {
  rss_bytes: "Process memory (RSS)",
  uss_bytes: "Process memory (USS)",
  allocated_blocks: "Python heap blocks",
  tracemalloc_bytes: "Python heap (tracemalloc)",
  bytes_in_use: "TensorFlow allocator in use",
  eager_count: "Live eager tensors",
  eager_bytes: "Live eager tensor bytes",
  numpy_count: "Live numpy arrays",
  numpy_bytes: "Live numpy array bytes",
  traces: "tf.function traces",
  instances: "tf.function instances",
};

export function seriesTitle(series) {
  const base = MEASURE_TITLES[series.measure] || series.measure || series.tag;
  return series.subject ? `${base}: ${series.subject}` : base;
}

export function legend(items) {
  return h("div", { className: "legend", testid: "legend" }, items.map((item) => {
    const swatch = h("span", { className: "swatch" });
    swatch.style.background = item.color;
    return h("span", { className: "legend-item" }, swatch, h("span", { text: item.label }), item.verdict ? verdictBadge(item.verdict, { small: true }) : null);
  }));
}

/** Live-object types with sparklines, growing ones first; the rest folded after `shown` rows. */
export function objectsTable(objects, { shown = 8 } = {}) {
  if (!objects.types.length) return h("p", { className: "muted", text: "No live-object census in this run." });
  const visible = Math.max(shown, objects.types.filter((t) => t.growing).length);
  const rows = objects.types.map((type, index) => {
    const row = h("tr", {
      className: type.growing ? "growing" : "",
      testid: "object-row",
      data: { type: type.name, growing: type.growing ? "true" : "false" },
    },
    h("td", { className: "name-cell", testid: "object-type", title: type.evidence || "" }, breakable(type.name)),
    h("td", {}, verdictBadge(type.growing ? "leak" : type.verdict, { small: true })),
    h("td", { className: "num", text: formatRate(type.growth_per_step, "objects") }),
    h("td", { className: "num", text: formatCount(type.last_count) }),
    h("td", { className: "spark-cell" }, sparkline(type.sparkline.step, type.sparkline.count, {
      color: type.growing ? "#e64a19" : "#9e9e9e", title: type.name,
    })));
    row.hidden = index >= visible;
    return row;
  });
  const tableNode = table("objects-table", ["type", "verdict", "growth", "live now", "over time"], rows, [2, 3]);
  const hiddenCount = Math.max(0, rows.length - visible);
  if (!hiddenCount) return tableNode;
  const toggle = h("button", {
    className: "button link", testid: "objects-more", attrs: { type: "button" },
    text: `Show all ${rows.length} types`,
  });
  toggle.addEventListener("click", () => {
    const expand = rows[visible].hidden;
    rows.slice(visible).forEach((row) => { row.hidden = !expand; });
    toggle.textContent = expand ? "Show fewer" : `Show all ${rows.length} types`;
  });
  return h("div", {}, tableNode, h("div", { className: "more" }, toggle));
}

/** Ops the profiler saw keep memory across steps. */
export function opsTable(ops) {
  const parts = [];
  if (ops.ops.length) {
    const rows = ops.ops.map((op) => h("tr", { testid: "op-row", data: { op: op.op || "" } },
      h("td", { className: "name-cell", testid: "op-name", title: op.reason || "" }, breakable(op.op || "?")),
      h("td", { className: "mono", text: op.shape || "–" }),
      h("td", { className: "mono", text: op.data_type || op.dtype || "–" }),
      h("td", { className: "num", text: formatBytes(op.retained_bytes) }),
      h("td", { className: "num", text: stepsRetained(op) }),
      h("td", { className: "num", text: op.retained_bytes_per_step === undefined ? "–" : `${formatBytes(op.retained_bytes_per_step, { signed: true })}/step` })));
    parts.push(table("ops-table", ["op", "shape", "dtype", "retained", "steps retained", "growth"], rows, [3, 4, 5]));
  } else {
    parts.push(h("p", { className: "muted", testid: "ops-empty",
      text: ops.has_traces ? "The profiler trace shows no op keeping memory across steps." : "No profiler trace in this run." }));
  }
  if (ops.notes && ops.notes.length) {
    parts.push(h("ul", { className: "notes", testid: "ops-notes" }, ops.notes.map((note) => h("li", { text: note }))));
  }
  return h("div", {}, parts);
}

function stepsRetained(op) {
  if (op.steps_retained === undefined || op.steps_retained === null) return "–";
  return op.steps_total ? `${formatStep(op.steps_retained)} of ${formatStep(op.steps_total)}` : formatStep(op.steps_retained);
}

export function warningsView(warnings) {
  if (!warnings || !warnings.length) return null;
  return h("section", { className: "card warnings", testid: "warnings" },
    h("h3", { text: "Warnings" }),
    h("ul", {}, warnings.map((w) => h("li", { text: w }))));
}

export function segmented(options, value, onChange, testid) {
  return h("div", { className: "segmented", testid, attrs: { role: "group" } },
    options.map(([key, label]) => h("button", {
      className: `segment${key === value ? " active" : ""}`,
      data: { value: key },
      attrs: { type: "button", "aria-pressed": key === value ? "true" : "false" },
      text: label,
      on: { click: () => onChange(key) },
    })));
}

export function colorFor(index) {
  return SERIES_COLORS[index % SERIES_COLORS.length];
}

export { formatAmount };

const STATUS_LABELS = { new: "new", grew: "grew", gone: "gone", in_both: "in both" };

/** The verdict on the difference between two runs (GET difference). */
export function differenceView(data, { onSwap } = {}) {
  const primary = data.primary;
  let headline = "No memory series to compare.";
  if (primary && primary.difference !== null && primary.difference !== undefined) {
    const more = primary.difference > 0 ? "more" : "less";
    headline = `${primary.tag} grows ${formatRate(Math.abs(primary.difference), primary.unit)} ${more} in the candidate ` +
      `(95% CI ${formatAmount(primary.difference_ci[0], primary.unit, { signed: true })} .. ` +
      `${formatAmount(primary.difference_ci[1], primary.unit, { signed: true })} per step).`;
  }
  const rows = data.series.filter((r) => r.verdict !== "not_compared").slice(0, 12).map((r) =>
    h("tr", { testid: "difference-row", data: { verdict: r.verdict } },
      h("td", { className: "name-cell" }, breakable(r.tag)),
      h("td", { className: "num", text: formatRate(r.base_slope, r.unit) }),
      h("td", { className: "num", text: formatRate(r.candidate_slope, r.unit) }),
      h("td", { className: "num", text: formatRate(r.difference, r.unit) }),
      h("td", {}, verdictBadge(r.verdict, { small: true }))));
  const changed = data.culprits.filter((c) => c.status !== "in_both").slice(0, 8);
  return h("section", { className: "card summary", testid: "difference-card", data: { verdict: data.verdict } },
    h("div", { className: "difference-head" },
      verdictBadge(data.verdict),
      h("span", { className: "difference-runs", testid: "difference-runs", text: `${data.base} → ${data.candidate}` }),
      onSwap ? h("button", { className: "button", testid: "difference-swap", text: "Swap base and candidate",
        attrs: { type: "button" }, on: { click: onSwap } }) : null),
    h("p", { testid: "difference-reason", text: `${data.reason}. ${headline}` }),
    h("p", { className: "muted small",
      text: `Runs: base ${verdictLabel(data.base_verdict)}, candidate ${verdictLabel(data.candidate_verdict)}.` }),
    rows.length ? table("difference-table", ["series", "base / step", "candidate / step", "difference / step", "verdict"],
      rows, [1, 2, 3]) : null,
    changed.length ? h("ul", { className: "difference-culprits", testid: "difference-culprits" },
      changed.map((c) => h("li", { text: `${STATUS_LABELS[c.status] || c.status}: ${c.kind} ${c.name}` }))) : null);
}
