// Data access: one fetch per URL, cached; every getter resolves to null on failure.
//
// URLs are relative: plugin_entry.html sets <base href="plugin/leak/">, so
// "runs" is /data/plugin/leak/runs (under any path prefix TensorBoard uses).

const cache = new Map();
let lastError = null;

async function fetchJson(url) {
  try {
    const response = await fetch(url, { credentials: "same-origin" });
    if (!response.ok) {
      let detail = "";
      try {
        detail = (await response.text()).trim();
      } catch (_) {
        /* body unreadable: the status says enough */
      }
      lastError = `${response.status} ${response.statusText}${detail ? `: ${detail}` : ""}`;
      return null;
    }
    return await response.json();
  } catch (error) {
    lastError = String(error && error.message ? error.message : error);
    return null;
  }
}

function cached(url) {
  if (!cache.has(url)) {
    const pending = fetchJson(url).then((value) => {
      if (value === null) cache.delete(url); // failures are retried next time
      return value;
    });
    cache.set(url, pending);
  }
  return cache.get(url);
}

function query(params) {
  const search = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) {
    if (Array.isArray(value)) value.forEach((v) => search.append(key, v));
    else if (value !== undefined && value !== null) search.append(key, String(value));
  }
  return search.toString();
}

/** Forget everything fetched (the Refresh button). */
export function clear() {
  cache.clear();
}

/** The last failure, as text for an error message. */
export function lastFailure() {
  return lastError;
}

export const getRuns = () => cached("runs");
export const getReport = (run) => cached(`report?${query({ run })}`);
export const getTimeline = (run, tag, x) => cached(`timeline?${query({ run, tag, x })}`);
export const getObjects = (run) => cached(`objects?${query({ run })}`);
export const getOps = (run) => cached(`ops?${query({ run })}`);
// Repeated run= parameters: run names may contain commas.
export const getCompare = (runs, tag, x) => cached(`compare?${query({ run: runs, tag, x })}`);
export const getDifference = (base, candidate) => cached(`difference?${query({ base, candidate })}`);
