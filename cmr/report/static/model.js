/* invoseq report: the model decoded into typed arrays and indexes the canvases draw from.
 *
 * The Python side (cmr/report/model.py) writes bars and flame nodes as columns; here each
 * column becomes a typed array, and the bars of every lane row are sorted by start with their
 * ends alongside, so the visible ones are found by bisection. Within one row calls never
 * overlap (they nest on their track), so the ends are sorted too. */
"use strict";

const Invoseq = (window.Invoseq = window.Invoseq || {});

Invoseq.MODEL_VERSION = 1;

Invoseq.decode = function decode(model) {
  if (model.version !== Invoseq.MODEL_VERSION) {
    throw new Error("unsupported report model version " + model.version);
  }
  const b = model.bars;
  const n = b.name.length;
  const bars = {
    n: n,
    name: Int32Array.from(b.name),
    kind: Uint8Array.from(b.kind),
    status: Uint8Array.from(b.status),
    lane: Int32Array.from(b.lane),
    row: Int32Array.from(b.row),
    depth: Int32Array.from(b.depth),
    parent: Int32Array.from(b.parent),
    start: Float64Array.from(b.start),
    end: Float64Array.from(b.end),
    open: Uint8Array.from(b.open, (v) => (v ? 1 : 0)),
    critical: new Uint8Array(n), // 1 for a bar on the critical path
    raw: b,
  };
  for (const i of model.critical) bars.critical[i] = 1;
  const lanes = model.lanes.map((lane) => ({ info: lane, rows: [] }));
  const counts = lanes.map((lane) => new Int32Array(Math.max(1, lane.info.rows)));
  for (let i = 0; i < n; i++) counts[bars.lane[i]][bars.row[i]]++;
  lanes.forEach((lane, l) => {
    lane.rows = Array.from(counts[l], (count) => ({
      bars: new Int32Array(count),
      starts: new Float64Array(count),
      ends: new Float64Array(count),
      fill: 0,
      matches: null, // prefix sums of search matches, while a search is on
    }));
  });
  for (let i = 0; i < n; i++) {
    const row = lanes[bars.lane[i]].rows[bars.row[i]];
    row.bars[row.fill++] = i;
  }
  for (const lane of lanes) {
    for (const row of lane.rows) {
      row.bars.sort((x, y) => bars.start[x] - bars.start[y] || bars.end[x] - bars.end[y]);
      for (let k = 0; k < row.bars.length; k++) {
        row.starts[k] = bars.start[row.bars[k]];
        row.ends[k] = bars.end[row.bars[k]];
      }
      // Zero-length calls at a caller's edge may tie: keep the ends non-decreasing for bisection.
      for (let k = 1; k < row.ends.length; k++) {
        if (row.ends[k] < row.ends[k - 1]) row.ends[k] = row.ends[k - 1];
      }
    }
  }
  const f = model.flame;
  const flame = {
    n: f.name.length,
    weight: f.weight,
    name: Int32Array.from(f.name),
    kind: Uint8Array.from(f.kind),
    parent: Int32Array.from(f.parent),
    depth: Int32Array.from(f.depth),
    value: Float64Array.from(f.value),
    raw: f,
  };
  layoutFlame(flame);
  return {
    model: model,
    summary: model.summary,
    names: model.names,
    kinds: model.kinds,
    statuses: model.statuses,
    bars: bars,
    lanes: lanes,
    arrows: model.arrows,
    critical: model.critical,
    flame: flame,
    end: Math.max(1, model.summary.end_ns),
  };
};

/* Each flame node's left edge and width as fractions of the whole: children side by side from
 * their parent's left edge; when they add up to more than their parent (time spent in parallel
 * on other threads) they are scaled down to fit. next[i] is the index after i's subtree. */
function layoutFlame(flame) {
  const n = flame.n;
  const x = new Float64Array(n);
  const w = new Float64Array(n);
  const next = new Int32Array(n);
  const childSum = new Float64Array(n);
  let rootSum = 0;
  let maxDepth = 0;
  for (let i = 0; i < n; i++) {
    const p = flame.parent[i];
    if (p < 0) rootSum += flame.value[i];
    else childSum[p] += flame.value[i];
    if (flame.depth[i] > maxDepth) maxDepth = flame.depth[i];
  }
  const cursor = new Float64Array(n);
  let rootCursor = 0;
  for (let i = 0; i < n; i++) {
    const p = flame.parent[i];
    if (p < 0) {
      w[i] = rootSum > 0 ? flame.value[i] / rootSum : 0;
      x[i] = rootCursor;
      rootCursor += w[i];
    } else {
      const scale = Math.max(flame.value[p], childSum[p]);
      w[i] = scale > 0 ? (w[p] * flame.value[i]) / scale : 0;
      x[i] = x[p] + cursor[p];
      cursor[p] += w[i];
    }
  }
  // Preorder: a subtree ends where the next node at its depth or above begins.
  const open = [];
  for (let i = 0; i < n; i++) {
    while (open.length && flame.depth[open[open.length - 1]] >= flame.depth[i]) {
      next[open.pop()] = i;
    }
    open.push(i);
  }
  while (open.length) next[open.pop()] = n;
  flame.x = x;
  flame.w = w;
  flame.next = next;
  flame.maxDepth = maxDepth;
}

/* Which bars and flame nodes a search matches (a case-insensitive substring of the name). */
Invoseq.search = function search(data, query) {
  const text = query.trim().toLowerCase();
  if (!text) {
    for (const lane of data.lanes) for (const row of lane.rows) row.matches = null;
    return null;
  }
  const byName = new Uint8Array(data.names.length);
  data.names.forEach((name, i) => {
    byName[i] = name.toLowerCase().includes(text) ? 1 : 0;
  });
  const bars = new Uint8Array(data.bars.n);
  let count = 0;
  for (let i = 0; i < data.bars.n; i++) {
    if (byName[data.bars.name[i]]) {
      bars[i] = 1;
      count++;
    }
  }
  for (const lane of data.lanes) {
    for (const row of lane.rows) {
      const prefix = new Int32Array(row.bars.length + 1);
      for (let k = 0; k < row.bars.length; k++) prefix[k + 1] = prefix[k] + bars[row.bars[k]];
      row.matches = prefix;
    }
  }
  const flame = new Uint8Array(data.flame.n);
  for (let i = 0; i < data.flame.n; i++) flame[i] = byName[data.flame.name[i]];
  return { text: text, bars: bars, flame: flame, count: count };
};

/* The first index k of a sorted array with values[k] > t (values.length when none). */
Invoseq.firstAbove = function firstAbove(values, t, lo) {
  let hi = values.length;
  lo = lo || 0;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (values[mid] > t) hi = mid;
    else lo = mid + 1;
  }
  return lo;
};

Invoseq.formatDuration = function formatDuration(ns) {
  if (ns === null || ns === undefined) return "—";
  const abs = Math.abs(ns);
  if (abs < 1e3) return ns.toFixed(0) + " ns";
  if (abs < 1e6) return (ns / 1e3).toPrecision(3) + " µs";
  if (abs < 1e9) return (ns / 1e6).toPrecision(4) + " ms";
  return (ns / 1e9).toPrecision(4) + " s";
};

/* A stable colour per name: the same function looks the same everywhere. */
Invoseq.hue = function hue(name) {
  let h = 2166136261;
  for (let i = 0; i < name.length; i++) {
    h ^= name.charCodeAt(i);
    h = Math.imul(h, 16777619);
  }
  return (h >>> 0) % 360;
};
