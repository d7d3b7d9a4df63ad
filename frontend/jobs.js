// Distributed jobs in the Leak tab: the tasks of one tf.distribute job side by
// side. The runs listing's `jobs` (see http_api.md) say which tasks leak and
// what the pattern means; the chart overlays the job's judged memory series,
// one line per task, through the compare route. Data only ever goes in as text.

import * as model from "./model.js";
import { h, verdictBadge, colorFor, legend, loading, errorState } from "./views.js";
import { mountTimeline } from "./chart.js";
import { formatBytes } from "./format.js";

// The compare route takes at most this many runs.
const MAX_CHART_TASKS = 12;

/** The sidebar list of jobs (none: null). */
export function jobList(jobs, { selected, onSelect }) {
  if (!jobs || !jobs.length) return null;
  const list = h("ul", { className: "run-list job-list", testid: "job-list", attrs: { role: "listbox" } });
  for (const job of jobs) {
    const isSelected = job.job === selected;
    const leaking = job.leaking.length;
    list.appendChild(h("li", {
      className: `run-item job-item${isSelected ? " selected" : ""}`,
      testid: "job-item",
      data: { job: job.job, verdict: job.verdict, pattern: job.pattern },
      attrs: { role: "option", "aria-selected": isSelected ? "true" : "false", tabindex: "0" },
      title: job.summary,
      on: {
        click: () => onSelect(job.job),
        keydown: (event) => { if (event.key === "Enter" || event.key === " ") { event.preventDefault(); onSelect(job.job); } },
      },
    },
    h("div", { className: "run-text" },
      h("div", { className: "run-name", testid: "job-name", text: job.job }),
      h("div", { className: "run-meta" },
        verdictBadge(job.verdict, { small: true }),
        h("span", { className: "run-growth", text: `${leaking} of ${job.tasks.length} tasks leak` })))));
  }
  return h("div", { className: "jobs-box" }, h("h2", { className: "side-title", text: "Jobs" }), list);
}

function taskTable(job, onSelectRun) {
  const head = h("tr", {}, ["task", "run", "verdict", "memory growth", "top culprit", "host"].map((t) => h("th", { text: t })));
  const rows = job.tasks.map((task) => h("tr", { testid: "job-task", data: { task: task.task, verdict: task.verdict } },
    h("td", { className: "mono", testid: "job-task-name", text: task.task }),
    h("td", {}, h("button", {
      className: "link-button", testid: "job-task-run", text: task.run, attrs: { type: "button" },
      title: "Open this run's report", on: { click: () => onSelectRun(task.run) },
    })),
    h("td", {}, verdictBadge(task.verdict, { small: true })),
    h("td", { className: "num", text: task.growth_bytes_per_step === null || task.growth_bytes_per_step === undefined
      ? "–" : `${formatBytes(task.growth_bytes_per_step, { signed: true })}/step` }),
    h("td", { text: task.top_culprit ? `[${task.top_culprit.kind}] ${task.top_culprit.name}` : "–" }),
    h("td", { className: "muted", text: task.host ? `${task.host} (pid ${task.pid})` : "–" })));
  return h("table", { className: "table job-table", testid: "job-tasks" }, h("thead", {}, head), h("tbody", {}, rows));
}

/** The job page: summary, the tasks' table and the side-by-side chart.
 *  Returns {nodes, load}; `load(isCurrent)` fetches and draws the chart and
 *  resolves to it (or null). */
export function jobPage(job, { x, onSelectRun }) {
  const notes = [];
  if (job.missing && job.missing.length) {
    const more = Number.isInteger(job.missing_count) ? job.missing_count - job.missing.length : 0;
    const rest = more > 0 ? ` and ${more.toLocaleString("en-US")} more` : "";
    notes.push(`No run from ${job.missing.join(", ")}${rest} (not started, or no Monitor there).`);
  }
  if (job.duplicated && job.duplicated.length) notes.push(`Several runs claim ${job.duplicated.join(", ")}.`);
  const summary = h("section", { className: "card summary", testid: "job-summary", data: { verdict: job.verdict, pattern: job.pattern } },
    h("div", { className: "summary-head" },
      h("h1", { className: "summary-run", testid: "job-title", text: `Job ${job.job}` }),
      verdictBadge(job.verdict)),
    h("p", { className: "summary-reason", testid: "job-advice", text: job.summary }),
    h("dl", { className: "facts" },
      [["tasks", String(job.tasks.length)], ["leaking", job.leaking.join(", ") || "none"],
        ["clean", job.clean.join(", ") || "none"], ["cluster", String(job.cluster_size || job.tasks.length)]]
        .map(([label, value]) => h("div", { className: "fact" }, h("dt", { text: label }), h("dd", { text: value })))),
    notes.map((note) => h("p", { className: "muted small", text: note })));
  const tasks = h("section", { className: "card job-section" }, h("h2", { text: "Tasks" }), h("div", { className: "table-wrap" }, taskTable(job, onSelectRun)));
  const host = h("div", { className: "chart-host" }, loading("Loading the tasks' series…"));
  const card = h("article", { className: "card chart-card wide job-chart", testid: "job-chart-card" },
    h("div", { className: "muted small", text: job.tag ? `${job.tag}, one line per task` : "no memory series to chart" }), host);

  async function load(isCurrent) {
    if (!job.tag) { host.replaceChildren(); return null; }
    const ordered = [...job.tasks].sort((a, b) => (a.verdict === "leak" ? 0 : 1) - (b.verdict === "leak" ? 0 : 1));
    const runs = ordered.slice(0, MAX_CHART_TASKS).map((t) => t.run);
    const label = new Map(job.tasks.map((t) => [t.run, t.task]));
    const data = await model.getCompare(runs, job.tag, x);
    if (!isCurrent()) return null;
    host.replaceChildren();
    if (!data) {
      host.appendChild(errorState("Could not load the tasks' series", model.lastFailure()));
      return null;
    }
    const relative = data.x === "wall_time";
    const series = data.series.map((s, i) => {
      const origin = relative && s.points.x.length ? s.points.x[0] : 0;
      const shift = (v) => (v === null || v === undefined ? v : v - origin);
      return {
        label: label.get(s.run) || s.run,
        color: colorFor(i),
        verdict: s.verdict,
        x: relative ? s.points.x.map(shift) : s.points.x,
        y: s.points.y,
        trend: s.trend && { ...s.trend, x: relative ? s.trend.x.map(shift) : s.trend.x },
      };
    });
    const chart = mountTimeline(host, {
      title: `${data.tag}: job ${job.job}`, tag: data.tag, unit: data.unit,
      xMode: relative ? "relative" : "step", band: false, series, height: 300,
    });
    host.appendChild(legend(series));
    if (job.tasks.length > MAX_CHART_TASKS) {
      host.appendChild(h("p", { className: "muted small", text: `${MAX_CHART_TASKS} of ${job.tasks.length} tasks shown (leaking ones first)` }));
    }
    if (data.missing.length) {
      host.appendChild(h("p", { className: "muted small", text: `Without this series: ${data.missing.map((r) => label.get(r) || r).join(", ")}` }));
    }
    return chart;
  }

  return { nodes: [summary, card, tasks], load };
}
