// The Leak tab. TensorBoard's plugin_entry.html imports this module inside an
// iframe and calls render(). Everything is same-origin (strict CSP): the
// stylesheet is a <link> to style.css served by the plugin.

import * as model from "./model.js";
import * as views from "./views.js";
import { mountTimeline } from "./chart.js";
import * as jobs from "./jobs.js";

const { h } = views;

const state = {
  runs: [],
  selected: null,
  compared: new Set(),
  jobs: [],
  selectedJob: null,
  mode: "run", // "run" | "compare" | "job"
  x: "step", // "step" | "wall_time"
  compareTag: null,
  compareSwap: false,
  token: 0,
  charts: [],
};

let shell = null;

export async function render() {
  document.title = "Leak";
  const styled = loadStylesheet();
  followTheme();
  shell = buildShell();
  document.body.replaceChildren(shell.root);
  await styled;
  await loadRuns();
}

function loadStylesheet() {
  if (document.querySelector("link[data-leak-style]")) return Promise.resolve();
  return new Promise((resolve) => {
    const link = document.createElement("link");
    link.rel = "stylesheet";
    link.href = "style.css";
    link.dataset.leakStyle = "1";
    link.addEventListener("load", resolve);
    link.addEventListener("error", resolve);
    setTimeout(resolve, 1500); // never block the tab on the stylesheet
    document.head.appendChild(link);
  });
}

/** Dark mode: TensorBoard's own setting (body.dark-mode of the parent page) wins,
 *  else the system preference. */
function followTheme() {
  const media = window.matchMedia ? window.matchMedia("(prefers-color-scheme: dark)") : null;
  let parentBody = null;
  try {
    if (window.parent && window.parent !== window) parentBody = window.parent.document.body;
  } catch (_) {
    parentBody = null; // cross-origin parent: fall back to the media query
  }
  const update = () => {
    const dark = parentBody ? parentBody.classList.contains("dark-mode") : Boolean(media && media.matches);
    document.body.classList.toggle("dark", dark);
  };
  update();
  if (media && media.addEventListener) media.addEventListener("change", update);
  if (parentBody && typeof MutationObserver !== "undefined") {
    new MutationObserver(update).observe(parentBody, { attributes: true, attributeFilter: ["class"] });
  }
}

function buildShell() {
  const runsBox = h("div", { className: "runs-box" }, views.loading("Loading runs…"));
  const jobsBox = h("div", { className: "jobs-holder", testid: "jobs-box" });
  const controls = h("div", { className: "controls" });
  const compareBar = h("div", { className: "compare-bar" });
  const main = h("main", { className: "content", testid: "content" });
  const sidebar = h("aside", { className: "sidebar" },
    h("div", { className: "sidebar-head" },
      h("h2", { text: "Runs" }),
      h("button", {
        className: "icon-button", title: "Reload data", testid: "refresh",
        attrs: { type: "button", "aria-label": "Reload data" }, text: "⟳",
        on: { click: refresh },
      })),
    controls, jobsBox, runsBox, compareBar);
  const root = h("div", { className: "leak-app", testid: "leak-app", data: { state: "loading" } }, sidebar, main);
  return { root, sidebar, runsBox, jobsBox, controls, compareBar, main };
}

function setReady(value) {
  shell.root.dataset.state = value;
}

async function refresh() {
  model.clear();
  await loadRuns();
}

async function loadRuns() {
  const token = ++state.token;
  setReady("loading");
  const data = await model.getRuns();
  if (token !== state.token) return;
  if (!data) {
    shell.runsBox.replaceChildren();
    showMain(views.errorState("Could not load the runs", model.lastFailure(), refresh));
    setReady("error");
    return;
  }
  state.runs = data.runs || [];
  state.jobs = data.jobs || [];
  if (state.mode === "job" && !state.jobs.some((j) => j.job === state.selectedJob)) state.mode = "run";
  const names = new Set(state.runs.map((r) => r.run));
  state.compared = new Set([...state.compared].filter((r) => names.has(r)));
  if (!state.runs.length) {
    shell.runsBox.replaceChildren(h("p", { className: "muted small pad", text: "No runs with tb-leak series." }));
    shell.controls.replaceChildren();
    shell.compareBar.replaceChildren();
    showMain(views.emptyState());
    setReady("ready");
    return;
  }
  if (!names.has(state.selected)) state.selected = state.runs[0].run;
  if (state.mode === "compare" && state.compared.size < 2) state.mode = "run";
  renderSidebar();
  await (state.mode === "compare" ? showCompare() : state.mode === "job" ? showJob(state.selectedJob) : showRun(state.selected));
}

function renderSidebar() {
  shell.controls.replaceChildren(
    h("span", { className: "control-label", text: "Horizontal axis" }),
    views.segmented([["step", "Step"], ["wall_time", "Wall time"]], state.x, (x) => {
      if (x === state.x) return;
      state.x = x;
      renderSidebar();
      if (state.mode === "compare") showCompare();
      else if (state.mode === "job") showJob(state.selectedJob);
      else showRun(state.selected);
    }, "x-toggle"));
  shell.jobsBox.replaceChildren(...[jobs.jobList(state.jobs, {
    selected: state.mode === "job" ? state.selectedJob : null,
    onSelect: (job) => { state.selectedJob = job; state.mode = "job"; renderSidebar(); showJob(job); },
  })].filter(Boolean));
  shell.runsBox.replaceChildren(views.runList(state.runs, {
    selected: state.mode === "run" ? state.selected : null,
    compared: state.compared,
    onSelect: (run) => {
      state.selected = run;
      state.mode = "run";
      renderSidebar();
      showRun(run);
    },
    onToggleCompare: (run, checked) => {
      if (checked) state.compared.add(run);
      else state.compared.delete(run);
      renderCompareBar();
      if (state.mode === "compare") {
        if (state.compared.size >= 2) showCompare();
        else { state.mode = "run"; renderSidebar(); showRun(state.selected); }
      }
    },
  }));
  renderCompareBar();
}

function renderCompareBar() {
  const count = state.compared.size;
  shell.compareBar.replaceChildren(
    h("span", { className: "muted small", text: count < 2 ? "Tick two or more runs to overlay them" : `${count} runs ticked` }),
    h("button", {
      className: "button primary", testid: "compare-button", text: "Compare",
      attrs: { type: "button", disabled: count < 2 },
      on: { click: () => { state.mode = "compare"; renderSidebar(); showCompare(); } },
    }));
}

function showMain(...nodes) {
  for (const chart of state.charts) chart.destroy();
  state.charts = [];
  shell.main.replaceChildren(...nodes.filter(Boolean));
  shell.main.scrollTop = 0;
}

// ---------------------------------------------------------------- one run

function chartGroups(report) {
  // A single sample is no timeline: such series stay in the report, not in a chart.
  const byRole = (role) => report.series.filter((s) => s.role === role && s.samples > 1);
  const memory = byRole("memory");
  const tensors = byRole("tensors").filter((s) => s.measure.endsWith("_count") || s.verdict === "leak");
  const traces = byRole("traces")
    .filter((s) => s.verdict === "leak" || (s.measure === "traces" && (s.last_value || 0) > 0))
    .sort((a, b) => (a.verdict === "leak" ? 0 : 1) - (b.verdict === "leak" ? 0 : 1) || (b.last_value || 0) - (a.last_value || 0));
  return [
    { title: "Memory", note: "trend fitted after the warm-up; band: 95% interval of the growth", series: memory, testid: "memory-section" },
    { title: "Live tensors", note: "eager tensors and numpy arrays alive at each sample", series: tensors, testid: "tensors-section" },
    { title: "tf.function traces", note: traces.length > 4 ? `top 4 of ${traces.length} functions` : "a growing count means retracing",
      series: traces.slice(0, 4), testid: "traces-section" },
  ].filter((group) => group.series.length);
}

async function showRun(run) {
  const token = ++state.token;
  setReady("loading");
  showMain(views.loading("Loading report…"));
  const report = await model.getReport(run);
  if (token !== state.token) return;
  if (!report) {
    showMain(views.errorState(`Could not load the report of run “${run}”`, model.lastFailure(), () => showRun(run)));
    setReady("error");
    return;
  }
  const chartJobs = [];
  const sections = [];
  for (const group of chartGroups(report)) {
    const { element, body } = views.section(group.title, group.note, group.testid);
    const grid = h("div", { className: "chart-grid" });
    body.appendChild(grid);
    for (const series of group.series) {
      const { card, host } = views.chartCard(series);
      grid.appendChild(card);
      chartJobs.push(() => loadChart(run, series, host, token));
    }
    sections.push(element);
  }
  const objects = views.section("Live objects by type", "growing types first; counts from the gc census", "objects-section");
  objects.body.appendChild(views.loading("Loading object census…"));
  const ops = views.section("Ops retaining memory", "from the profiler trace: allocations never freed across steps", "ops-section");
  ops.body.appendChild(views.loading("Loading profiler analysis…"));
  const culprits = views.culpritsView(report.culprits);
  let culpritSection = null;
  if (culprits) {
    const s = views.section("Culprits", "ranked by confidence", "culprits-section");
    s.body.appendChild(culprits);
    culpritSection = s.element;
  }
  showMain(
    views.runSummary(report),
    views.libraryLeaksView(report.library_leaks),
    views.hintsView(report.hints),
    culpritSection,
    views.tracedEarlierView(report.traced_earlier),
    ...sections,
    objects.element,
    ops.element,
    views.warningsView(report.warnings),
  );
  const jobs = chartJobs.map((job) => job());
  jobs.push(fill(objects.body, model.getObjects(run), views.objectsTable, "the object census", token));
  jobs.push(fill(ops.body, model.getOps(run), views.opsTable, "the profiler analysis", token));
  await Promise.all(jobs);
  if (token === state.token) setReady("ready");
}

async function fill(body, pending, build, what, token) {
  const data = await pending;
  if (token !== state.token) return;
  body.replaceChildren(data ? build(data) : views.errorState(`Could not load ${what}`, model.lastFailure()));
}

async function loadChart(run, series, host, token) {
  const data = await model.getTimeline(run, series.tag, state.x);
  if (token !== state.token) return;
  host.replaceChildren();
  if (!data) {
    host.appendChild(views.errorState("Could not load this series", model.lastFailure()));
    return;
  }
  const chart = mountTimeline(host, {
    title: `${run}: ${series.tag}`,
    tag: series.tag,
    unit: data.unit,
    xMode: data.x,
    band: true,
    series: [{ label: series.tag, color: "#1976d2", x: data.points.x, y: data.points.y, trend: data.trend, verdict: data.verdict }],
    warmupEnd: data.warmup_end,
    onset: data.verdict === "leak" ? data.onset : null,
  });
  state.charts.push(chart);
  if (data.downsampled) {
    host.appendChild(h("div", { className: "muted tiny", text: `${data.points.x.length.toLocaleString("en-US")} of ${data.total_points.toLocaleString("en-US")} points shown (min/max per bucket)` }));
  }
}

// ---------------------------------------------------------------- a distributed job

async function showJob(name) {
  const token = ++state.token;
  setReady("loading");
  const job = state.jobs.find((j) => j.job === name);
  if (!job) {
    showMain(views.errorState(`No job “${name}”`));
    setReady("ready");
    return;
  }
  const page = jobs.jobPage(job, {
    x: state.x,
    onSelectRun: (run) => { state.selected = run; state.mode = "run"; renderSidebar(); showRun(run); },
  });
  showMain(...page.nodes);
  const chart = await page.load(() => token === state.token);
  if (chart) state.charts.push(chart);
  if (token === state.token) setReady("ready");
}

// ---------------------------------------------------------------- compare

function compareTags(runs) {
  const rows = state.runs.filter((r) => runs.includes(r.run));
  const seen = new Map();
  for (const row of rows) {
    for (const t of row.tags || []) {
      const entry = seen.get(t.tag) || { ...t, count: 0 };
      entry.count += 1;
      seen.set(t.tag, entry);
    }
  }
  const order = { memory: 0, tensors: 1, traces: 2 };
  return [...seen.values()].sort((a, b) => (order[a.role] ?? 9) - (order[b.role] ?? 9) || b.count - a.count || a.tag.localeCompare(b.tag));
}

async function showCompare() {
  const token = ++state.token;
  setReady("loading");
  const runs = state.runs.map((r) => r.run).filter((r) => state.compared.has(r));
  const tags = compareTags(runs);
  if (!tags.length) {
    showMain(views.errorState("These runs share no series to compare"));
    setReady("ready");
    return;
  }
  const first = state.runs.find((r) => r.run === runs[0]);
  if (!tags.some((t) => t.tag === state.compareTag)) {
    const primary = first && first.primary_tag;
    state.compareTag = tags.some((t) => t.tag === primary) ? primary : tags[0].tag;
  }
  const select = h("select", {
    className: "select", testid: "compare-tag", attrs: { "aria-label": "Series" },
    on: { change: (event) => { state.compareTag = event.target.value; showCompare(); } },
  }, tags.map((t) => {
    const option = h("option", { text: t.count < runs.length ? `${t.tag} (${t.count} of ${runs.length} runs)` : t.tag });
    option.value = t.tag;
    option.selected = t.tag === state.compareTag;
    return option;
  }));
  const host = h("div", { className: "chart-host" }, views.loading("Loading series…"));
  const card = h("article", { className: "card chart-card wide", testid: "compare-card" }, host);
  // Two runs: a verdict on their difference, base = the run checked first.
  const differenceHost = h("div", { testid: "difference-host" });
  const pair = runs.length === 2 ? [...state.compared].filter((r) => runs.includes(r)) : null;
  if (pair && state.compareSwap) pair.reverse();
  showMain(
    h("section", { className: "card summary" },
      h("div", { className: "summary-head" },
        h("h1", { className: "summary-run", text: `Comparing ${runs.length} runs` }),
        h("button", { className: "button", text: "Back to run", attrs: { type: "button" },
          on: { click: () => { state.mode = "run"; renderSidebar(); showRun(state.selected); } } })),
      h("label", { className: "field" }, h("span", { className: "control-label", text: "Series" }), select)),
    differenceHost,
    card);
  if (pair) {
    differenceHost.appendChild(views.loading("Comparing the two runs…"));
    const difference = await model.getDifference(pair[0], pair[1]);
    if (token !== state.token) return;
    differenceHost.replaceChildren(difference
      ? views.differenceView(difference, { onSwap: () => { state.compareSwap = !state.compareSwap; showCompare(); } })
      : views.errorState("Could not compare the two runs", model.lastFailure(), showCompare));
  }
  const data = await model.getCompare(runs, state.compareTag, state.x);
  if (token !== state.token) return;
  host.replaceChildren();
  if (!data) {
    host.appendChild(views.errorState("Could not load the comparison", model.lastFailure(), showCompare));
    setReady("error");
    return;
  }
  // Runs started at different times: overlay them on time since each run's first sample.
  const relative = data.x === "wall_time";
  const series = data.series.map((s, i) => {
    const origin = relative && s.points.x.length ? s.points.x[0] : 0;
    const shift = (v) => (v === null || v === undefined ? v : v - origin);
    return {
      label: s.run,
      color: views.colorFor(i),
      verdict: s.verdict,
      x: relative ? s.points.x.map(shift) : s.points.x,
      y: s.points.y,
      trend: s.trend && { ...s.trend, x: relative ? s.trend.x.map(shift) : s.trend.x },
    };
  });
  state.charts.push(mountTimeline(host, {
    title: `${data.tag} in ${runs.length} runs`, tag: data.tag, unit: data.unit,
    xMode: relative ? "relative" : "step", band: false, series, height: 300,
  }));
  host.appendChild(views.legend(series));
  if (data.missing.length) {
    host.appendChild(h("p", { className: "muted small", text: `Without this series: ${data.missing.join(", ")}` }));
  }
  setReady("ready");
}
