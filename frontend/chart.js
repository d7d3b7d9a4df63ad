// SVG charts: timelines (with trend, interval band, warm-up and onset) and sparklines.
// Every text that comes from the data goes in through text nodes only.

import { byteScale, formatAmount, formatClock, formatDuration, formatStep, inert } from "./format.js";

const SVG_NS = "http://www.w3.org/2000/svg";
const MARGIN = { top: 14, right: 18, bottom: 30, left: 70 };
const HEIGHT = 210;

export const SERIES_COLORS = ["#1976d2", "#f57c00", "#7b1fa2", "#00897b", "#c2185b", "#5d4037", "#455a64", "#afb42b"];

function svg(name, attrs = {}, text) {
  const node = document.createElementNS(SVG_NS, name);
  for (const [key, value] of Object.entries(attrs)) {
    if (value !== undefined && value !== null) node.setAttribute(key, String(value));
  }
  if (text !== undefined) node.textContent = inert(text);
  return node;
}

function html(name, className, text) {
  const node = document.createElement(name);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = inert(text);
  return node;
}

/** "Nice" tick values covering [min, max], about `count` of them. */
export function niceTicks(min, max, count = 5) {
  // A range lost in the values' rounding (a flat series whose fitted trend
  // differs from it in the last bits) is flat: ticks could never step across it.
  if (!(max - min > 1e-9 * Math.max(Math.abs(min), Math.abs(max)))) {
    const pad = Math.abs(min) > 0 ? Math.abs(min) * 0.05 : 1;
    min -= pad;
    max += pad;
  }
  const raw = (max - min) / Math.max(1, count);
  const power = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * power).find((s) => s >= raw) || 10 * power;
  const ticks = [];
  if (!(step > 0) || !Number.isFinite(min) || !Number.isFinite(max)) return { ticks, step: 1, min, max };
  for (let value = Math.ceil(min / step) * step; value <= max + step * 1e-9 && ticks.length <= 4 * count + 8;
    value += step) {
    ticks.push(Math.abs(value) < step * 1e-9 ? 0 : value);
  }
  return { ticks, step, min, max };
}

const TIME_STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400];

function timeTicks(min, max, count = 5) {
  const raw = (max - min) / Math.max(1, count);
  const step = TIME_STEPS.find((s) => s >= raw) || Math.ceil(raw / 86400) * 86400;
  const ticks = [];
  if (!(step > 0) || !Number.isFinite(min) || !Number.isFinite(max)) return ticks;
  for (let value = Math.ceil(min / step) * step; value <= max && ticks.length <= 4 * count + 8; value += step) {
    ticks.push(value);
  }
  return ticks;
}

/** Decimals that tell ticks `step` apart: 0.25 -> 2, 5 -> 0. */
function decimalsFor(step) {
  if (!(step > 0)) return 0;
  let decimals = Math.max(0, -Math.floor(Math.log10(step) + 1e-9));
  if (Math.abs(step * Math.pow(10, decimals) - Math.round(step * Math.pow(10, decimals))) > 1e-6) decimals += 1;
  return Math.min(decimals, 6);
}

/** y-axis scaling for a unit over a domain: bytes in KiB/MiB/GiB, counts with k/M. */
function yFormatter(unit, domainMax) {
  if (unit === "bytes") {
    const { name, size } = byteScale(domainMax);
    return { name, size };
  }
  const magnitude = Math.abs(domainMax);
  if (magnitude >= 1e9) return { name: "G", size: 1e9, suffix: true };
  if (magnitude >= 1e6) return { name: "M", size: 1e6, suffix: true };
  if (magnitude >= 1e4) return { name: "k", size: 1e3, suffix: true };
  return { name: "", size: 1 };
}

function tickLabel(scale, value, step) {
  const text = (value / scale.size).toFixed(decimalsFor(step / scale.size));
  if (!scale.name) return Number(text).toLocaleString("en-US", { maximumFractionDigits: 6 });
  return scale.suffix ? `${text}${scale.name}` : `${text} ${scale.name}`;
}

function lowerBound(xs, x) {
  let lo = 0;
  let hi = xs.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (xs[mid] < x) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

function nearestIndex(xs, x) {
  if (!xs.length) return -1;
  const i = lowerBound(xs, x);
  if (i <= 0) return 0;
  if (i >= xs.length) return xs.length - 1;
  return x - xs[i - 1] <= xs[i] - x ? i - 1 : i;
}

/**
 * Mount a timeline chart into `host` and redraw it when the host is resized.
 *
 * spec: {
 *   title, unit, xMode: "step" | "wall_time",
 *   series: [{label, color, x: [], y: [], trend, verdict}],
 *   warmupEnd, onset, band: true when the first series' interval band is drawn,
 * }
 * Returns {element, destroy()}.
 */
export function mountTimeline(host, spec) {
  const frame = html("div", "chart-frame");
  frame.setAttribute("data-testid", "chart");
  if (spec.tag) frame.dataset.tag = spec.tag;
  host.appendChild(frame);
  let lastWidth = 0;
  const draw = () => {
    const width = Math.max(240, Math.floor(frame.clientWidth || host.clientWidth || 480));
    if (width === lastWidth) return;
    lastWidth = width;
    drawTimeline(frame, spec, width);
  };
  draw();
  let observer = null;
  if (typeof ResizeObserver !== "undefined") {
    let pending = 0;
    observer = new ResizeObserver(() => {
      cancelAnimationFrame(pending);
      pending = requestAnimationFrame(draw);
    });
    observer.observe(frame);
  }
  return {
    element: frame,
    destroy() {
      if (observer) observer.disconnect();
    },
  };
}

function domainOf(spec) {
  let xMin = Infinity, xMax = -Infinity, yMin = Infinity, yMax = -Infinity;
  for (const s of spec.series) {
    for (let i = 0; i < s.x.length; i++) {
      const x = s.x[i], y = s.y[i];
      if (x < xMin) xMin = x;
      if (x > xMax) xMax = x;
      if (y < yMin) yMin = y;
      if (y > yMax) yMax = y;
    }
    const t = s.trend;
    if (t) {
      for (const v of [...t.y, ...(spec.band ? [...t.low, ...t.high] : [])]) {
        if (v === null || !Number.isFinite(v)) continue;
        if (v < yMin) yMin = v;
        if (v > yMax) yMax = v;
      }
    }
  }
  if (!Number.isFinite(xMin)) { xMin = 0; xMax = 1; }
  if (xMax === xMin) { xMin -= 1; xMax += 1; }
  if (!Number.isFinite(yMin)) { yMin = 0; yMax = 1; }
  const pad = (yMax - yMin) * 0.06 || Math.abs(yMax) * 0.05 || 1;
  return { xMin, xMax, yMin: yMin - pad, yMax: yMax + pad };
}

/** Sizes, domain, scales and labels of one timeline drawing. */
function layoutOf(spec, width) {
  const height = spec.height || HEIGHT;
  const plotW = width - MARGIN.left - MARGIN.right;
  const plotH = height - MARGIN.top - MARGIN.bottom;
  const domain = domainOf(spec);
  const scale = yFormatter(spec.unit, Math.max(Math.abs(domain.yMin), Math.abs(domain.yMax)));
  // Ticks are nice numbers in the display unit (e.g. MiB), not in bytes.
  const yTicks = niceTicks(domain.yMin / scale.size, domain.yMax / scale.size, 4);
  const isWall = spec.xMode === "wall_time";
  const isRelative = spec.xMode === "relative";
  return {
    width, height, plotW, plotH, domain, scale, isWall, isRelative,
    yStep: yTicks.step * scale.size,
    yValues: yTicks.ticks.map((t) => t * scale.size),
    sx: (x) => MARGIN.left + ((x - domain.xMin) / (domain.xMax - domain.xMin)) * plotW,
    sy: (y) => MARGIN.top + (1 - (y - domain.yMin) / (domain.yMax - domain.yMin)) * plotH,
    xLabel: (v) => (isWall ? formatClock(v) : isRelative ? formatDuration(v) : formatStep(v)),
  };
}

function drawTimeline(frame, spec, width) {
  frame.replaceChildren();
  const layout = layoutOf(spec, width);
  const root = svg("svg", { width, height: layout.height, viewBox: `0 0 ${width} ${layout.height}`,
    role: "img", class: "chart" });
  root.appendChild(svg("title", {}, spec.title || ""));
  const { grid, axis } = drawAxes(layout);
  root.appendChild(grid);
  const plot = clippedPlot(root, layout);
  drawWarmup(plot, spec, layout);
  // Interval band and trend lines under the data.
  drawBand(plot, spec, layout);
  drawSeries(plot, spec, layout);
  drawTrends(plot, spec, layout);
  drawOnset(plot, spec, layout);
  root.appendChild(axis);
  attachReadout(frame, root, spec, layout);
}

/** Grid lines and labelled axes: {grid, axis} groups, not yet attached. */
function drawAxes(layout) {
  const { plotW, plotH, domain, sx, sy, scale } = layout;
  const grid = svg("g", { class: "grid" });
  const axis = svg("g", { class: "axis" });
  for (const value of layout.yValues) {
    const y = sy(value);
    if (y < MARGIN.top - 0.5 || y > MARGIN.top + plotH + 0.5) continue;
    grid.appendChild(svg("line", { x1: MARGIN.left, x2: MARGIN.left + plotW, y1: y, y2: y }));
    axis.appendChild(svg("text", { x: MARGIN.left - 8, y: y + 4, "text-anchor": "end" },
      tickLabel(scale, value, layout.yStep)));
  }
  const xTickValues = layout.isWall || layout.isRelative
    ? timeTicks(domain.xMin, domain.xMax, Math.max(2, Math.floor(plotW / 110)))
    : niceTicks(domain.xMin, domain.xMax, Math.max(2, Math.floor(plotW / 90))).ticks;
  for (const t of xTickValues) {
    if (t < domain.xMin || t > domain.xMax) continue;
    const x = sx(t);
    grid.appendChild(svg("line", { x1: x, x2: x, y1: MARGIN.top, y2: MARGIN.top + plotH, class: "vertical" }));
    axis.appendChild(svg("text", { x, y: MARGIN.top + plotH + 18, "text-anchor": "middle" },
      layout.xLabel(t)));
  }
  axis.appendChild(svg("line", { x1: MARGIN.left, x2: MARGIN.left + plotW, y1: MARGIN.top + plotH,
    y2: MARGIN.top + plotH, class: "baseline" }));
  return { grid, axis };
}

/** The plot area, clipped to the axes: a <g> attached to `root`. */
function clippedPlot(root, layout) {
  const clipId = `clip-${Math.random().toString(36).slice(2)}`;
  const defs = svg("defs");
  const clip = svg("clipPath", { id: clipId });
  clip.appendChild(svg("rect", { x: MARGIN.left, y: MARGIN.top, width: layout.plotW, height: layout.plotH }));
  defs.appendChild(clip);
  root.appendChild(defs);
  const plot = svg("g", { "clip-path": `url(#${clipId})` });
  root.appendChild(plot);
  return plot;
}

/** The warm-up region (single-run charts): excluded from the fit. */
function drawWarmup(plot, spec, layout) {
  if (spec.warmupEnd === null || spec.warmupEnd === undefined || !(spec.warmupEnd > layout.domain.xMin)) return;
  const x1 = Math.min(layout.sx(spec.warmupEnd), MARGIN.left + layout.plotW);
  const region = svg("rect", { x: MARGIN.left, y: MARGIN.top, width: Math.max(0, x1 - MARGIN.left),
    height: layout.plotH, class: "warmup", "data-role": "warmup" });
  region.appendChild(svg("title", {}, "warm-up: excluded from the trend fit"));
  plot.appendChild(region);
  if (x1 - MARGIN.left > 52) {
    plot.appendChild(svg("text", { x: MARGIN.left + 6, y: MARGIN.top + 14, class: "marker-label" }, "warm-up"));
  }
}

/** The first series' 95% interval band, when the spec asks for it. */
function drawBand(plot, spec, layout) {
  const { sx, sy } = layout;
  spec.series.forEach((s, index) => {
    const t = s.trend;
    if (!t || t.x[0] === null || t.x[1] === null) return;
    if (spec.band && index === 0 && t.low[1] !== null && t.high[1] !== null) {
      const points = [
        [sx(t.x[0]), sy(t.low[0])], [sx(t.x[1]), sy(t.low[1])],
        [sx(t.x[1]), sy(t.high[1])], [sx(t.x[0]), sy(t.high[0])],
      ];
      const band = svg("polygon", { points: points.map((p) => p.map((v) => v.toFixed(1)).join(",")).join(" "),
        class: "band", "data-role": "band" });
      band.appendChild(svg("title", {}, "95% interval of the growth rate"));
      plot.appendChild(band);
    }
  });
}

/** One line per series (a dot for a single point). */
function drawSeries(plot, spec, layout) {
  const { sx, sy } = layout;
  spec.series.forEach((s) => {
    if (!s.x.length) return;
    if (s.x.length === 1) {
      plot.appendChild(svg("circle", { cx: sx(s.x[0]), cy: sy(s.y[0]), r: 3, fill: s.color, "data-role": "series" }));
      return;
    }
    let d = "";
    for (let i = 0; i < s.x.length; i++) {
      d += `${i ? "L" : "M"}${sx(s.x[i]).toFixed(1)} ${sy(s.y[i]).toFixed(1)}`;
    }
    const path = svg("path", { d, class: "series", stroke: s.color, "data-role": "series" });
    path.appendChild(svg("title", {}, s.label));
    plot.appendChild(path);
  });
}

/** Each series' fitted trend line. */
function drawTrends(plot, spec, layout) {
  const { sx, sy } = layout;
  spec.series.forEach((s, index) => {
    const t = s.trend;
    if (!t || t.x[0] === null || t.x[1] === null || t.y[1] === null) return;
    const line = svg("line", { x1: sx(t.x[0]), y1: sy(t.y[0]), x2: sx(t.x[1]), y2: sy(t.y[1]),
      class: "trend", "data-role": "trend" });
    // Overlays draw each run's trend in its own colour (CSSOM: allowed by the CSP).
    if (!(spec.band && index === 0)) line.style.stroke = s.color;
    line.appendChild(svg("title", {}, `fitted trend: ${s.label}`));
    plot.appendChild(line);
  });
}

/** The onset marker: where the growth starts. */
function drawOnset(plot, spec, layout) {
  const { domain, plotW, plotH } = layout;
  if (spec.onset === null || spec.onset === undefined || !(spec.onset > domain.xMin && spec.onset <= domain.xMax)) return;
  const x = layout.sx(spec.onset);
  const onset = svg("line", { x1: x, x2: x, y1: MARGIN.top, y2: MARGIN.top + plotH, class: "onset",
    "data-role": "onset" });
  const when = layout.isWall || layout.isRelative ? layout.xLabel(spec.onset) : "step " + formatStep(spec.onset);
  onset.appendChild(svg("title", {}, `growth starts at ${when}`));
  plot.appendChild(onset);
  const labelLeft = x > MARGIN.left + plotW - 50;
  plot.appendChild(svg("text", { x: labelLeft ? x - 5 : x + 5, y: MARGIN.top + plotH - 6,
    "text-anchor": labelLeft ? "end" : "start", class: "marker-label onset-label" }, "onset"));
}

/** The hover cursor, dots and read-out box; attaches `root` and the read-out to `frame`. */
function attachReadout(frame, root, spec, layout) {
  const { domain, plotW, plotH, sx, sy } = layout;
  const cursor = svg("line", { y1: MARGIN.top, y2: MARGIN.top + plotH, class: "cursor", visibility: "hidden" });
  root.appendChild(cursor);
  const dots = spec.series.map((s) => {
    const dot = svg("circle", { r: 3.5, fill: s.color, class: "hover-dot", visibility: "hidden" });
    root.appendChild(dot);
    return dot;
  });
  const overlay = svg("rect", { x: MARGIN.left, y: MARGIN.top, width: plotW, height: plotH, class: "overlay" });
  root.appendChild(overlay);
  frame.appendChild(root);

  const readout = html("div", "readout");
  readout.hidden = true;
  readout.dataset.testid = "readout";
  frame.appendChild(readout);

  const hide = () => {
    readout.hidden = true;
    cursor.setAttribute("visibility", "hidden");
    dots.forEach((d) => d.setAttribute("visibility", "hidden"));
  };
  overlay.addEventListener("mouseleave", hide);
  overlay.addEventListener("mousemove", (event) => {
    const box = root.getBoundingClientRect();
    const px = event.clientX - box.left;
    const x = domain.xMin + ((px - MARGIN.left) / plotW) * (domain.xMax - domain.xMin);
    const lines = [];
    let anchorX = null;
    spec.series.forEach((s, index) => {
      const i = nearestIndex(s.x, x);
      if (i < 0) {
        dots[index].setAttribute("visibility", "hidden");
        return;
      }
      if (anchorX === null) anchorX = s.x[i];
      dots[index].setAttribute("cx", sx(s.x[i]));
      dots[index].setAttribute("cy", sy(s.y[i]));
      dots[index].setAttribute("visibility", "visible");
      lines.push({ color: s.color, label: s.label, value: formatAmount(s.y[i], spec.unit), x: s.x[i] });
    });
    if (anchorX === null) return hide();
    cursor.setAttribute("x1", sx(anchorX));
    cursor.setAttribute("x2", sx(anchorX));
    cursor.setAttribute("visibility", "visible");
    fillReadout(readout, spec, layout, anchorX, lines);
    placeReadout(readout, px, layout.width);
  });
}

/** The read-out's text: the x position, then one row per series. */
function fillReadout(readout, spec, layout, anchorX, lines) {
  readout.replaceChildren();
  const xText = layout.isWall ? formatClock(anchorX, true)
    : layout.isRelative ? `+${formatDuration(anchorX)}` : `step ${Math.round(anchorX).toLocaleString("en-US")}`;
  readout.appendChild(html("div", "readout-x", xText));
  for (const line of lines) {
    const row = html("div", "readout-row");
    const swatch = html("span", "swatch");
    swatch.style.background = line.color;
    row.appendChild(swatch);
    if (spec.series.length > 1) row.appendChild(html("span", "readout-label", line.label));
    row.appendChild(html("span", "readout-value", line.value));
    readout.appendChild(row);
  }
  readout.hidden = false;
}

/** Beside the cursor, flipped to its left near the right edge. */
function placeReadout(readout, px, width) {
  const left = Math.min(px + 12, width - readout.offsetWidth - 4);
  readout.style.left = `${Math.max(4, left < px + 12 ? px - readout.offsetWidth - 12 : left)}px`;
  readout.style.top = `${MARGIN.top + 4}px`;
}

/** A small inline chart of one series: an <svg> element. */
export function sparkline(xs, ys, { width = 120, height = 28, color = "#f57c00", title = "" } = {}) {
  const root = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, class: "sparkline" });
  if (title) root.appendChild(svg("title", {}, title));
  if (!xs.length) return root;
  let xMin = xs[0], xMax = xs[xs.length - 1], yMin = Infinity, yMax = -Infinity;
  for (const y of ys) {
    if (y < yMin) yMin = y;
    if (y > yMax) yMax = y;
  }
  if (xMax === xMin) xMax = xMin + 1;
  if (yMax === yMin) { yMax += 1; yMin -= 1; }
  const px = (x) => 2 + ((x - xMin) / (xMax - xMin)) * (width - 4);
  const py = (y) => 3 + (1 - (y - yMin) / (yMax - yMin)) * (height - 6);
  let d = "";
  for (let i = 0; i < xs.length; i++) d += `${i ? "L" : "M"}${px(xs[i]).toFixed(1)} ${py(ys[i]).toFixed(1)}`;
  if (xs.length === 1) d += `L${(px(xs[0]) + 1).toFixed(1)} ${py(ys[0]).toFixed(1)}`;
  root.appendChild(svg("path", { d, stroke: color, class: "spark" }));
  return root;
}
