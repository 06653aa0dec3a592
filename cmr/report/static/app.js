/* invoseq report: the page — summary, tabs, search, details panel, live refresh, test hook.
 *
 * The model is inlined as JSON (#invoseq-model); #invoseq-config may name a live URL, which a
 * running sequence is re-read from every 2 s (the same model as JSON), keeping zoom and
 * selection, until it is no longer running. window.invoseqReport lets tests ask what the
 * canvases hold: lanes, bar and arrow counts, where a bar is drawn, and select or search. */
"use strict";

(function () {
  const POLL_MS = 2000;
  const $ = (id) => document.getElementById(id);
  const config = JSON.parse($("invoseq-config").textContent);
  const violations = [];
  document.addEventListener("securitypolicyviolation", (event) => {
    violations.push(event.blockedURI || event.violatedDirective);
  });

  let data = null;
  let found = null;
  let selection = null; // {view: "bar" | "flame", index}
  let view = "timeline";
  let fitted = true; // the timeline shows the whole sequence: follow it as it grows

  const callbacks = (kind) => ({
    select: (index) => select(kind, index),
    hover: (index, x, y) => hover(kind, index, x, y),
  });
  const timeline = new Invoseq.Timeline($("timeline"), callbacks("bar"));
  const flame = new Invoseq.Flame($("flame"), false, callbacks("flame"));
  const icicle = new Invoseq.Flame($("icicle"), true, callbacks("flame"));

  function apply(model, keep) {
    const previous = data;
    data = Invoseq.decode(model);
    if (keep && previous) {
      const shift = Number(BigInt(data.summary.origin) - BigInt(previous.summary.origin));
      timeline.t0 -= shift;
      timeline.t1 -= shift;
    }
    const keepView = keep && !fitted;
    timeline.setData(data, keepView);
    flame.setData(data, keep);
    icicle.setData(data, keep);
    if (keep && selection) selection = carry(previous, selection);
    runSearch();
    renderSummary();
    renderDetails();
    publish();
  }

  /* The same call in a new model: a measured call by (puid, iid), anything else by its place. */
  function carry(previous, chosen) {
    if (chosen.view !== "bar") return chosen.index < data.flame.n ? chosen : null;
    const old = previous.bars;
    const i = chosen.index;
    const puid = previous.lanes[old.lane[i]].info.puid;
    const iid = old.raw.iid[i];
    const name = previous.names[old.name[i]];
    for (let k = 0; k < data.bars.n; k++) {
      const same = iid !== null
        ? data.bars.raw.iid[k] === iid && data.lanes[data.bars.lane[k]].info.puid === puid
        : data.names[data.bars.name[k]] === name && data.bars.depth[k] === old.depth[i] &&
          data.bars.raw.start[k] === old.raw.start[i];
      if (same) return { view: "bar", index: k };
    }
    return null;
  }

  function select(kind, index) {
    selection = index >= 0 ? { view: kind, index: index } : null;
    timeline.selected = selection && kind === "bar" ? index : -1;
    const frame = selection && kind === "flame" ? index : -1;
    flame.selected = frame;
    icicle.selected = frame;
    timeline.requestDraw();
    flame.requestDraw();
    icicle.requestDraw();
    renderDetails();
  }

  function hover(kind, index, x, y) {
    const tip = $("tooltip");
    if (index < 0) {
      tip.hidden = true;
      return;
    }
    if (kind === "bar") {
      const b = data.bars;
      tip.textContent =
        data.names[b.name[index]] + " — " + Invoseq.formatDuration(b.end[index] - b.start[index]);
    } else {
      const f = data.flame;
      tip.textContent = data.names[f.name[index]] + " — " + flameValue(index);
    }
    tip.hidden = false;
    tip.style.left = Math.min(x + 12, window.innerWidth - tip.offsetWidth - 8) + "px";
    tip.style.top = y + 14 + "px";
  }

  function flameValue(i) {
    const f = data.flame;
    return f.weight === "samples"
      ? f.raw.samples[i] + " samples"
      : Invoseq.formatDuration(f.raw.time[i]);
  }

  function runSearch() {
    const query = $("search").value;
    found = Invoseq.search(data, query);
    timeline.found = found;
    flame.found = found;
    icicle.found = found;
    const count = found ? found.count : 0;
    const label = $("search-count");
    label.dataset.count = String(count);
    label.textContent = found ? count + (count === 1 ? " call" : " calls") : "";
    label.title = found ? "the calls on the timeline (measured or estimated from samples) whose name contains the search text, in any case; the flame graph lights its frames of those names too" : "";
    timeline.requestDraw();
    flame.requestDraw();
    icicle.requestDraw();
    return count;
  }

  const STATUS_TITLES = {
    complete: "The root call ended (work it did not wait for, detached, may still run).",
    error: "The root call ended, and raised.",
    running: "The root call has not ended yet, in a process still running.",
    incomplete: "The root call will never end: its process ended or was lost first.",
  };

  function renderSummary() {
    const s = data.summary;
    $("root-name").textContent = s.root;
    const status = $("status");
    status.textContent = s.status + (s.lossy ? ", lossy" : "");
    status.className = "status " + s.status;
    status.title = STATUS_TITLES[s.status] || "";
    if (s.lossy) status.title += " Lossy: the tracer dropped some of its events (past its memory bound, or the repository away with the spool full); what is shown is what arrived.";
    // [label, value, what it counts, a short visible word where the figure needs one]: each
    // figure says what it is on hover (its title). What each counts: cmr/report/model.py.
    const facts = [
      ["seq", s.seq, "the sequence id: the W3C trace-id every call of the sequence carries"],
      ["started", s.origin_iso.replace("T", " ").replace("Z", " UTC"),
        "when its earliest call started, in UTC, by the clock of the host that ran it (each process's times are turned into wall-clock time when they are stored)"],
      ["shown span", Invoseq.formatDuration(s.end_ns),
        "from its earliest call's start to the latest end among its calls (a call still open: its start): the width of the timeline. More than the root's duration when work outlived the root"],
      ["calls", String(s.invocations),
        "the traced calls (invocations) recorded in the sequence, across all its threads and processes, empty hand-off calls folded away included; frames estimated from stack samples are not counted"],
      ["threads", String(s.threads), "the threads its traced calls ran on, in all its processes"],
      ["processes", String(s.processes), "the processes its traced calls ran in"],
    ];
    if (s.samples_skipped) {
      facts.push([
        "samples not placed",
        String(s.samples_skipped),
        "stack samples (a collapsed sample counts its ticks) taken inside a traced call of their thread whose stack showed neither that call's function nor a traced caller's, so they could not be cut into the tree: they are in no frame of the flame graph and no estimated call. Samples outside every traced call are not counted here: they belong to no call at all",
        "not in the tree: their stack showed no traced call",
      ]);
    }
    const list = $("facts");
    list.replaceChildren();
    for (const [key, value, title, note] of facts) {
      const item = document.createElement("span");
      item.innerHTML = "<b></b> ";
      item.firstChild.textContent = key;
      item.title = title;
      item.dataset.fact = key;
      item.append(value);
      if (note) {
        const small = document.createElement("small");
        small.className = "fact-note";
        small.textContent = " (" + note + ")";
        item.append(small);
      }
      list.append(item);
    }
    const live = $("live");
    live.hidden = !(config.liveUrl && s.status === "running");
    document.title = "invoseq · " + s.root + " · " + s.seq.slice(0, 12);
  }

  function absolute(rel) {
    const ms = Number(BigInt(data.summary.origin) / 1000000n) + rel / 1e6;
    return new Date(ms).toISOString().replace("T", " ").replace("Z", " UTC");
  }

  function renderDetails() {
    const list = $("details-fields");
    list.replaceChildren();
    $("details-hint").hidden = !!selection;
    if (!selection) return;
    const rows = selection.view === "bar" ? barDetails(selection.index) : flameDetails(selection.index);
    for (const [key, label, value] of rows) {
      const dt = document.createElement("dt");
      dt.textContent = label;
      const dd = document.createElement("dd");
      dd.dataset.testid = "detail-" + key;
      if (value instanceof Node) dd.append(value);
      else dd.textContent = value;
      list.append(dt, dd);
    }
  }

  function barDetails(i) {
    const b = data.bars;
    const raw = b.raw;
    const lane = data.lanes[b.lane[i]].info;
    const kind = data.kinds[b.kind[i]];
    const duration = b.end[i] - b.start[i];
    const rows = [
      ["name", "name", data.names[b.name[i]]],
      ["kind", "kind", kind === "estimated" ? "estimated from samples" : kind === "synthetic" ? "made up by the repository" : "measured"],
      ["status", "status", data.statuses[b.status[i]]],
      ["seq", "seq", data.summary.seq],
      ["puid", "puid", lane.puid === null ? "—" : lane.puid],
      ["iid", "iid", raw.iid[i] === null ? "—" : raw.iid[i].padStart(16, "0")],
      ["start", "start", "+" + Invoseq.formatDuration(b.start[i]) + " · " + absolute(b.start[i])],
      ["duration", "duration", Invoseq.formatDuration(duration) + (b.open[i] ? " so far (not ended)" : "")],
      ["self", "self time", Invoseq.formatDuration(raw.self[i])],
      ["error", "exception", raw.error[i] === null ? "—" : raw.error[i]],
      ["process", "host:pid", lane.puid === null ? "—" : lane.process + (lane.state && lane.state !== "alive" ? " (" + lane.state + ")" : "")],
      ["thread", "thread", lane.puid === null ? "—" : lane.thread + " (" + lane.tid + ")"],
    ];
    if (b.critical[i]) rows.push(["critical", "critical path", "on it (it set the end-to-end time)"]);
    if (raw.handoff[i] !== null) {
      const arrow = data.arrows.find((a) => a.to === i);
      const wait = arrow ? ", queued " + Invoseq.formatDuration(arrow.queued) : "";
      rows.push(["handoff", "hand-off", raw.handoff[i] + wait]);
    }
    if (raw.detached && raw.detached[i]) {
      rows.push(["detached", "detached", "it outlived its caller: the sequence did not wait for it"]);
    }
    if (raw.samples[i]) {
      const cpu = raw.cpu[i] === null ? "" : ", CPU " + Invoseq.formatDuration(raw.cpu[i]);
      rows.push(["samples", "samples", raw.samples[i] + cpu]);
    }
    if (raw.frame[i] !== null) {
      const [file, fn, line] = raw.frame[i];
      rows.push(["frame", "frame", fn + " (" + file + ":" + line + ")"]);
    }
    if (raw.bounds && raw.bounds[i]) {
      const [startMin, startMax, endMin, endMax] = raw.bounds[i];
      const at = (t) => "+" + Invoseq.formatDuration(t);
      const ended = endMax === null ? "after " + at(endMin) : at(endMin) + " to " + at(endMax);
      rows.push(["bounds", "bounds", "started " + at(startMin) + " to " + at(startMax) + ", ended " + ended]);
    }
    const logs = logLines(raw.attributes[i]);
    if (logs.length) rows.push(["logs", "log records", lineList(logs)]);
    rows.push(["attributes", "attributes", attributes(raw.attributes[i])]);
    return rows;
  }

  /* The log records the tracer recorded on a call are attributes log.0, log.1, … (in the order
   * they were made) and log.dropped (how many more there were): cmr/views/render/logs.py. */
  const LOG_DROPPED = "log.dropped";
  const isLogKey = (key) => key === LOG_DROPPED || /^log\.[0-9]{1,9}$/.test(key);

  function logLines(values) {
    if (!values) return [];
    const lines = Object.keys(values)
      .filter((key) => key !== LOG_DROPPED && isLogKey(key))
      .sort((a, b) => Number(a.slice(4)) - Number(b.slice(4)))
      .map((key) => "⚠ " + String(values[key]));
    const dropped = values[LOG_DROPPED];
    if (typeof dropped === "number" && dropped > 0) {
      lines.push("… " + dropped + " more log record" + (dropped === 1 ? "" : "s") + " dropped");
    }
    return lines;
  }

  function lineList(lines) {
    const list = document.createElement("div");
    for (const line of lines) {
      const row = document.createElement("div");
      row.textContent = line;
      list.append(row);
    }
    return list;
  }

  function attributes(values) {
    const keys = values ? Object.keys(values).filter((key) => !isLogKey(key)) : [];
    if (!keys.length) return "—";
    const table = document.createElement("table");
    for (const key of keys.sort()) {
      const tr = table.insertRow();
      tr.insertCell().textContent = key;
      tr.insertCell().textContent = JSON.stringify(values[key]);
    }
    return table;
  }

  function flameDetails(i) {
    const f = data.flame;
    const raw = f.raw;
    return [
      ["name", "name", data.names[f.name[i]]],
      ["kind", "kind", data.kinds[f.kind[i]] === "estimated" ? "estimated from samples" : data.kinds[f.kind[i]]],
      ["calls", "merged calls", String(raw.calls[i])],
      ["duration", "total time", Invoseq.formatDuration(raw.time[i])],
      ["self", "self time", Invoseq.formatDuration(raw.self[i])],
      ["samples", "samples", String(raw.samples[i])],
    ];
  }

  function show(next) {
    view = next;
    for (const button of document.querySelectorAll("nav.tabs button")) {
      button.classList.toggle("active", button.dataset.view === next);
    }
    $("timeline").hidden = next !== "timeline";
    $("flame").hidden = next !== "flame";
    $("icicle").hidden = next !== "icicle";
    $("flame-note").hidden = next === "timeline";
    $("legend").hidden = next !== "timeline";
    current().requestDraw();
  }

  function current() {
    return view === "timeline" ? timeline : view === "flame" ? flame : icicle;
  }

  function publish() {
    const hook = window.invoseqReport;
    hook.lanes = data.lanes.map((lane) =>
      lane.info.puid === null ? lane.info.thread : lane.info.process + " / " + lane.info.thread
    );
    hook.barCount = data.bars.n;
    hook.arrowCount = data.arrows.length;
    hook.flameCount = data.flame.n;
    hook.status = data.summary.status;
    hook.updates += 1;
  }

  function poll() {
    if (!config.liveUrl || data.summary.status !== "running") return;
    setTimeout(async () => {
      try {
        const response = await fetch(config.liveUrl, { cache: "no-store" });
        if (response.ok) apply(await response.json(), true);
        $("live").textContent = "live";
      } catch (error) {
        $("live").textContent = "live: repository unreachable, retrying";
      }
      poll();
    }, POLL_MS);
  }

  window.invoseqReport = {
    lanes: [],
    barCount: 0,
    arrowCount: 0,
    flameCount: 0,
    status: "",
    updates: 0,
    readyAt: null,
    violations: violations,
    names: (i) => data.names[data.bars.name[i]],
    critical: () => data.critical.slice(),
    select: (index) => {
      show("timeline");
      timeline.reveal(index);
      select("bar", index);
    },
    selectByName: (name) => {
      for (let i = 0; i < data.bars.n; i++) {
        if (data.names[data.bars.name[i]] === name) {
          window.invoseqReport.select(i);
          return i;
        }
      }
      return -1;
    },
    selected: () => (selection ? Object.assign({}, selection) : null),
    barsNamed: (name) => {
      const found = [];
      for (let i = 0; i < data.bars.n; i++) {
        if (data.names[data.bars.name[i]] !== name) continue;
        found.push({ index: i, iid: data.bars.raw.iid[i], error: data.bars.raw.error[i] });
      }
      return found;
    },
    search: (query) => {
      $("search").value = query;
      return runSearch();
    },
    reveal: (index) => {
      timeline.reveal(index);
      timeline.draw();
    },
    barRect: (index) => {
      const rect = timeline.barRect(index);
      if (!rect) return null;
      const box = $("timeline").getBoundingClientRect();
      return { x: rect.x + box.left, y: rect.y + box.top, w: rect.w, h: rect.h };
    },
    show: show,
  };

  let searchTimer = 0;
  $("search").addEventListener("input", () => {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(runSearch, 120);
  });
  $("reset").addEventListener("click", () => {
    fitted = true;
    current().reset();
  });
  for (const button of document.querySelectorAll("nav.tabs button")) {
    button.addEventListener("click", () => show(button.dataset.view));
  }
  for (const id of ["timeline"]) {
    $(id).addEventListener("wheel", () => (fitted = false));
    $(id).addEventListener("pointerdown", () => (fitted = false));
  }
  window.addEventListener("resize", () => current().requestDraw());

  try {
    apply(JSON.parse($("invoseq-model").textContent), false);
  } catch (error) {
    $("root-name").textContent = "This report cannot be shown: " + error.message;
    throw error;
  }
  requestAnimationFrame(() => {
    window.invoseqReport.readyAt = performance.now();
  });
  poll();
})();
