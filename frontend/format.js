// Number formatting shared by the views and charts: units are explicit.
// Also `inert`, which every text from the data goes through before it is shown.

// Bidirectional controls (marks, embeddings, overrides, isolates): in a name
// from the data they would reorder the text around them (a task type ending
// in U+202E shows the job's summary reversed). Shown as visible escapes.
const BIDI_CONTROLS = /[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;

/** `text` as a string with bidirectional controls shown as `\u202e`: it
 *  reads as it is stored, whatever it holds. Idempotent. */
export function inert(text) {
  return String(text).replace(BIDI_CONTROLS, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
}

const BINARY_UNITS = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];

// A growth or bound smaller than this (bytes, objects or traces per step) is
// floating-point residue of a line fitted to an exactly flat series
// (-3.01e-19/step): one object in a billion steps. It is shown as 0.
const RESIDUE = 1e-9;

function settled(value) {
  return Math.abs(value) < RESIDUE ? 0 : value;
}

/** The binary unit that suits a magnitude in bytes: {name, size}. */
export function byteScale(maxAbsBytes) {
  let index = 0;
  let size = 1;
  while (index < BINARY_UNITS.length - 1 && Math.abs(maxAbsBytes) >= size * 1024) {
    size *= 1024;
    index += 1;
  }
  return { name: BINARY_UNITS[index], size };
}

/** Bytes as "12.3 MiB" (signed: "+12.3 MiB"). */
export function formatBytes(bytes, { signed = false, digits = 1 } = {}) {
  if (bytes === null || bytes === undefined || !Number.isFinite(bytes)) return "–";
  bytes = settled(bytes);
  const { name, size } = byteScale(bytes);
  const sign = bytes < 0 ? "−" : signed ? "+" : "";
  const magnitude = Math.abs(bytes) / size;
  const text = name === "B" ? magnitude.toFixed(0) : magnitude.toFixed(digits);
  return `${sign}${text} ${name}`;
}

/** A plain count with k/M/G suffixes: 1234 -> "1.23k". */
export function formatCount(value, { signed = false } = {}) {
  if (value === null || value === undefined || !Number.isFinite(value)) return "–";
  value = settled(value);
  const sign = value < 0 ? "−" : signed ? "+" : "";
  const magnitude = Math.abs(value);
  let text;
  if (magnitude >= 1e9) text = `${trim(magnitude / 1e9)}G`;
  else if (magnitude >= 1e6) text = `${trim(magnitude / 1e6)}M`;
  else if (magnitude >= 1e4) text = `${trim(magnitude / 1e3)}k`;
  else if (magnitude >= 100 || Number.isInteger(magnitude)) text = Math.round(magnitude).toLocaleString("en-US");
  else text = trim(magnitude);
  return sign + text;
}

function trim(value) {
  return Number(value.toPrecision(3)).toString();
}

/** A value in its series unit: bytes humanised, other units as counts + unit. */
export function formatAmount(value, unit, { signed = false } = {}) {
  if (unit === "bytes") return formatBytes(value, { signed });
  const text = formatCount(value, { signed });
  if (text === "–" || !unit || unit === "count") return text;
  return `${text} ${unit}`;
}

/** Growth per step: "+256.0 KiB/step". */
export function formatRate(value, unit) {
  if (value === null || value === undefined || !Number.isFinite(value)) return "–";
  return `${formatAmount(value, unit, { signed: true })}/step`;
}

export function formatPercent(fraction) {
  if (fraction === null || fraction === undefined || !Number.isFinite(fraction)) return "–";
  return `${Math.round(fraction * 100)}%`;
}

export function formatStep(step) {
  if (step === null || step === undefined || !Number.isFinite(step)) return "–";
  return formatCount(step);
}

/** Wall time (seconds since the epoch) as a local clock time. */
export function formatClock(seconds, withDate = false) {
  if (!Number.isFinite(seconds)) return "–";
  const date = new Date(seconds * 1000);
  const time = date.toLocaleTimeString("en-GB", { hour12: false });
  if (!withDate) return time;
  return `${date.toLocaleDateString("en-CA")} ${time}`;
}

export const VERDICT_LABELS = {
  leak: "leak",
  no_leak: "no leak",
  inconclusive: "inconclusive",
  not_assessed: "not judged",
  error: "error",
  regression: "regression",
  no_regression: "no regression",
  improvement: "improvement",
  not_compared: "not compared",
};

export function verdictLabel(verdict) {
  return VERDICT_LABELS[verdict] || String(verdict || "unknown");
}

/** Seconds as a short duration: 95 -> "1m 35s", 7260 -> "2h 1m". */
export function formatDuration(seconds) {
  if (!Number.isFinite(seconds)) return "–";
  const sign = seconds < 0 ? "−" : "";
  let s = Math.round(Math.abs(seconds));
  if (s < 60) return `${sign}${s}s`;
  const d = Math.floor(s / 86400); s -= d * 86400;
  const hh = Math.floor(s / 3600); s -= hh * 3600;
  const m = Math.floor(s / 60); s -= m * 60;
  if (d) return `${sign}${d}d ${hh}h`;
  if (hh) return `${sign}${hh}h ${m}m`;
  return `${sign}${m}m${s ? ` ${s}s` : ""}`;
}
