/* invoseq report: the timeline canvas — one lane per thread, bars nested by row, hand-off
 * arrows, zoom (wheel), pan (drag), click to select.
 *
 * Level of detail: per lane row only the bars that meet the visible time range are visited
 * (bisection on the row's sorted ends), and where bars are narrower than a pixel, every bar
 * that ends inside that pixel column is drawn as one block, found by one more bisection. A
 * frame costs about (visible rows × canvas width × log n), whatever the number of calls. */
"use strict";

(function () {
  const ROW_H = 18;
  const AXIS_H = 26;
  const LABEL_W = 190;
  const PROCESS_H = 18;
  const LANE_PAD = 4;
  const MIN_SPAN_NS = 100;
  const COLORS = {
    block: "#8f99a8",
    blockMatch: "#f29e38",
    error: "#d62828",
    selected: "#111",
    critical: "#7b2cbf",
    match: "#f29e38",
    wait: "rgba(80, 120, 220, 0.22)",
    arrow: "rgba(40, 70, 170, 0.85)",
    open: "#e07b00",
    bounds: "rgba(60, 60, 80, 0.75)",
  };

  class Timeline {
    constructor(canvas, callbacks) {
      this.canvas = canvas;
      this.ctx = canvas.getContext("2d");
      this.callbacks = callbacks; // {select(index), hover(index, x, y)}
      this.data = null;
      this.t0 = 0;
      this.t1 = 1;
      this.scrollY = 0;
      this.selected = -1;
      this.found = null;
      this.pending = false;
      this.hatch = null;
      this.listen();
    }

    setData(data, keepView) {
      const old = this.data;
      this.data = data;
      this.layoutLanes();
      if (!keepView || !old) this.reset();
      this.draw();
    }

    reset() {
      const pad = this.data.end * 0.02;
      this.t0 = -pad;
      this.t1 = this.data.end + pad;
      this.scrollY = 0;
      this.requestDraw();
    }

    /* Lanes grouped by process: a header line per process, then its threads' lanes. */
    layoutLanes() {
      let y = 0;
      let process = null;
      this.laneTop = [];
      this.headers = [];
      for (const lane of this.data.lanes) {
        const key = lane.info.puid;
        if (key !== process) {
          process = key;
          this.headers.push({ y: y, lane: lane });
          y += PROCESS_H;
        }
        this.laneTop.push(y);
        y += lane.info.rows * ROW_H + 2 * LANE_PAD;
      }
      this.contentH = y;
    }

    width() {
      return this.canvas.clientWidth;
    }
    height() {
      return this.canvas.clientHeight;
    }
    plotW() {
      return Math.max(1, this.width() - LABEL_W);
    }
    x(t) {
      return LABEL_W + ((t - this.t0) / (this.t1 - this.t0)) * this.plotW();
    }
    t(x) {
      return this.t0 + ((x - LABEL_W) / this.plotW()) * (this.t1 - this.t0);
    }
    rowY(lane, row) {
      return AXIS_H + this.laneTop[lane] + LANE_PAD + row * ROW_H - this.scrollY;
    }

    requestDraw() {
      if (this.pending) return;
      this.pending = true;
      requestAnimationFrame(() => {
        this.pending = false;
        this.draw();
      });
    }

    resize() {
      const dpr = window.devicePixelRatio || 1;
      const w = Math.max(1, Math.round(this.canvas.clientWidth * dpr));
      const h = Math.max(1, Math.round(this.canvas.clientHeight * dpr));
      if (this.canvas.width !== w || this.canvas.height !== h) {
        this.canvas.width = w;
        this.canvas.height = h;
      }
      this.ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    }

    draw() {
      if (!this.data) return;
      this.resize();
      const ctx = this.ctx;
      const W = this.width();
      const H = this.height();
      ctx.clearRect(0, 0, W, H);
      ctx.font = "11px system-ui, sans-serif";
      ctx.textBaseline = "middle";
      const lanes = this.data.lanes;
      for (let l = 0; l < lanes.length; l++) {
        const top = AXIS_H + this.laneTop[l] - this.scrollY;
        const height = lanes[l].info.rows * ROW_H + 2 * LANE_PAD;
        if (top > H || top + height < AXIS_H) continue;
        ctx.fillStyle = l % 2 ? "#f7f8fa" : "#ffffff";
        ctx.fillRect(LABEL_W, top, W - LABEL_W, height);
        for (let r = 0; r < lanes[l].rows.length; r++) {
          const y = this.rowY(l, r);
          if (y > H || y + ROW_H < AXIS_H) continue;
          this.drawRow(lanes[l].rows[r], y);
        }
      }
      this.drawArrows();
      this.drawLabels();
      this.drawAxis();
    }

    drawRow(row, y) {
      const ctx = this.ctx;
      const bars = this.data.bars;
      const found = this.found;
      const right = this.width();
      let k = Invoseq.firstAbove(row.ends, this.t0);
      // A zero-length call at the very left edge still counts.
      while (k > 0 && row.ends[k - 1] === this.t0) k--;
      const n = row.bars.length;
      while (k < n && row.starts[k] <= this.t1) {
        const x0 = this.x(row.starts[k]);
        const x1 = this.x(row.ends[k]);
        if (x1 - x0 >= 1) {
          this.drawBar(row.bars[k], Math.max(x0, LABEL_W - 2), Math.min(x1, right + 2), y);
          k++;
          continue;
        }
        // Every bar ending inside this pixel column becomes one block.
        const column = Math.floor(x0) + 1;
        const last = Math.max(k + 1, Invoseq.firstAbove(row.ends, this.t(column), k));
        const hit = found && row.matches && row.matches[last] - row.matches[k] > 0;
        ctx.globalAlpha = found && !hit ? 0.3 : 1;
        ctx.fillStyle = hit ? COLORS.blockMatch : COLORS.block;
        ctx.fillRect(Math.max(x0, LABEL_W), y + 1, Math.max(1, column - x0), ROW_H - 2);
        ctx.globalAlpha = 1;
        k = last;
      }
    }

    /* Whiskers of an estimated bar: where it can have started and ended (Node.bounds), a thin
     * line with end caps across each window, through the middle of the row. */
    drawBounds(i, y) {
      const ctx = this.ctx;
      const [startMin, startMax, endMin, endMax] = this.data.bars.raw.bounds[i];
      const mid = y + ROW_H / 2;
      ctx.strokeStyle = COLORS.bounds;
      ctx.lineWidth = 1;
      const whisker = (from, to) => {
        const a = Math.max(LABEL_W, this.x(from));
        const b = Math.min(this.width(), this.x(to));
        if (b < a) return;
        ctx.beginPath();
        ctx.moveTo(a, mid + 0.5);
        ctx.lineTo(b, mid + 0.5);
        ctx.moveTo(a + 0.5, mid - 3);
        ctx.lineTo(a + 0.5, mid + 4);
        ctx.moveTo(b - 0.5, mid - 3);
        ctx.lineTo(b - 0.5, mid + 4);
        ctx.stroke();
      };
      whisker(startMin, startMax);
      whisker(endMin, endMax === null ? this.t1 : endMax);
    }

    drawBar(i, x0, x1, y) {
      const ctx = this.ctx;
      const data = this.data;
      const bars = data.bars;
      const name = data.names[bars.name[i]];
      const kind = data.kinds[bars.kind[i]];
      const status = data.statuses[bars.status[i]];
      const hue = Invoseq.hue(name);
      const w = x1 - x0;
      const dim = this.found && !this.found.bars[i];
      ctx.globalAlpha = dim ? 0.3 : 1;
      if (kind === "synthetic") {
        ctx.setLineDash([4, 3]);
        ctx.strokeStyle = "#667";
        ctx.strokeRect(x0 + 0.5, y + 1.5, Math.max(0, w - 1), ROW_H - 3);
        ctx.setLineDash([]);
      } else if (kind === "estimated") {
        ctx.fillStyle = "hsl(" + hue + ", 45%, 88%)";
        ctx.fillRect(x0, y + 1, w, ROW_H - 2);
        ctx.fillStyle = this.hatchPattern();
        ctx.fillRect(x0, y + 1, w, ROW_H - 2);
        ctx.strokeStyle = "hsl(" + hue + ", 40%, 55%)";
        ctx.setLineDash([3, 2]);
        if (w > 3) ctx.strokeRect(x0 + 0.5, y + 1.5, w - 1, ROW_H - 3);
        ctx.setLineDash([]);
      } else {
        ctx.fillStyle = "hsl(" + hue + ", 60%, 72%)";
        ctx.fillRect(x0, y + 1, w, ROW_H - 2);
      }
      if (kind === "estimated" && bars.raw.bounds && bars.raw.bounds[i]) this.drawBounds(i, y);
      if (bars.open[i] && w > 4) {
        ctx.fillStyle = COLORS.open;
        ctx.fillRect(x1 - 3, y + 1, 3, ROW_H - 2);
      }
      if (status === "error") {
        ctx.strokeStyle = COLORS.error;
        ctx.lineWidth = 2;
        ctx.strokeRect(x0 + 1, y + 2, Math.max(0, w - 2), ROW_H - 4);
        ctx.lineWidth = 1;
        ctx.fillStyle = COLORS.error;
        ctx.beginPath();
        ctx.moveTo(x1, y + 1);
        ctx.lineTo(x1 - 7, y + 1);
        ctx.lineTo(x1, y + 8);
        ctx.fill();
      }
      if (bars.critical[i] && w > 2) {
        // The critical path: a band along the bar's top edge, under the other marks.
        ctx.fillStyle = COLORS.critical;
        ctx.fillRect(x0, y + 1, w, 3);
      }
      if (this.found && this.found.bars[i]) {
        ctx.strokeStyle = COLORS.match;
        ctx.lineWidth = 2;
        ctx.strokeRect(x0 + 1, y + 1, Math.max(0, w - 2), ROW_H - 2);
        ctx.lineWidth = 1;
      }
      if (i === this.selected) {
        ctx.strokeStyle = COLORS.selected;
        ctx.lineWidth = 2;
        ctx.strokeRect(x0 + 1, y + 1, Math.max(0, w - 2), ROW_H - 2);
        ctx.lineWidth = 1;
      }
      if (w > 28) {
        const chars = Math.floor((w - 8) / 6.2);
        const label = name.length > chars ? name.slice(0, Math.max(1, chars - 1)) + "…" : name;
        ctx.fillStyle = "#1b1e24";
        ctx.fillText(label, x0 + 4, y + ROW_H / 2 + 0.5);
      }
      ctx.globalAlpha = 1;
    }

    hatchPattern() {
      if (!this.hatch) {
        const tile = document.createElement("canvas");
        tile.width = tile.height = 6;
        const c = tile.getContext("2d");
        c.strokeStyle = "rgba(60, 60, 80, 0.35)";
        c.beginPath();
        c.moveTo(0, 6);
        c.lineTo(6, 0);
        c.stroke();
        this.hatch = this.ctx.createPattern(tile, "repeat");
      }
      return this.hatch;
    }

    /* The queue wait shaded on the worker's row, then an arrow from the submitting bar (at the
     * submit time) to the start of the bar that ran the work. */
    drawArrows() {
      const ctx = this.ctx;
      const bars = this.data.bars;
      const W = this.width();
      for (const arrow of this.data.arrows) {
        const xs = this.x(arrow.submitted);
        const xe = this.x(arrow.start);
        if (Math.max(xs, xe) < LABEL_W || Math.min(xs, xe) > W) continue;
        const from = arrow.from;
        const to = arrow.to;
        const ys = this.rowY(bars.lane[from], bars.row[from]) + ROW_H / 2;
        const ye = this.rowY(bars.lane[to], bars.row[to]) + ROW_H / 2;
        const left = Math.max(LABEL_W, Math.min(xs, xe));
        ctx.fillStyle = COLORS.wait;
        ctx.fillRect(left, ye - ROW_H / 2 + 1, Math.max(1, Math.max(xs, xe) - left), ROW_H - 2);
        ctx.strokeStyle = COLORS.arrow;
        ctx.fillStyle = COLORS.arrow;
        ctx.lineWidth = 1.2;
        ctx.beginPath();
        ctx.moveTo(xs, ys);
        const bend = Math.max(12, Math.abs(ye - ys) / 2);
        ctx.bezierCurveTo(xs, ys + Math.sign(ye - ys) * bend, xe - bend, ye, xe, ye);
        ctx.stroke();
        ctx.beginPath();
        ctx.moveTo(xe, ye);
        ctx.lineTo(xe - 7, ye - 4);
        ctx.lineTo(xe - 7, ye + 4);
        ctx.fill();
        ctx.beginPath();
        ctx.arc(xs, ys, 2.5, 0, 2 * Math.PI);
        ctx.fill();
        ctx.lineWidth = 1;
      }
    }

    drawLabels() {
      const ctx = this.ctx;
      const H = this.height();
      ctx.fillStyle = "#eef0f4";
      ctx.fillRect(0, AXIS_H, LABEL_W, H - AXIS_H);
      ctx.strokeStyle = "#c9ced8";
      ctx.beginPath();
      ctx.moveTo(LABEL_W - 0.5, AXIS_H);
      ctx.lineTo(LABEL_W - 0.5, H);
      ctx.stroke();
      for (const header of this.headers) {
        const y = AXIS_H + header.y - this.scrollY;
        if (y > H || y + PROCESS_H < AXIS_H) continue;
        const info = header.lane.info;
        ctx.fillStyle = "#dde2ea";
        ctx.fillRect(0, y, this.width(), PROCESS_H);
        ctx.fillStyle = "#1b1e24";
        ctx.font = "bold 11px system-ui, sans-serif";
        const state = info.state && info.state !== "alive" ? " (" + info.state + ")" : "";
        const label = info.puid === null ? "made up by the repository" : info.process + state;
        ctx.fillText(label, 6, y + PROCESS_H / 2 + 0.5);
      }
      ctx.font = "11px system-ui, sans-serif";
      this.data.lanes.forEach((lane, l) => {
        const y = AXIS_H + this.laneTop[l] - this.scrollY + LANE_PAD;
        if (y > H || y + ROW_H < AXIS_H) return;
        const info = lane.info;
        const tid = info.puid === null ? "" : " (" + info.tid + ")";
        ctx.fillStyle = "#2b3140";
        ctx.fillText(clip(info.thread + tid, 28), 14, y + ROW_H / 2);
      });
    }

    drawAxis() {
      const ctx = this.ctx;
      const W = this.width();
      ctx.fillStyle = "#ffffff";
      ctx.fillRect(0, 0, W, AXIS_H);
      ctx.strokeStyle = "#c9ced8";
      ctx.beginPath();
      ctx.moveTo(0, AXIS_H - 0.5);
      ctx.lineTo(W, AXIS_H - 0.5);
      ctx.stroke();
      const span = this.t1 - this.t0;
      const target = span / Math.max(1, this.plotW() / 110);
      const power = Math.pow(10, Math.floor(Math.log10(target)));
      const step = [1, 2, 5, 10].map((m) => m * power).find((s) => s >= target) || power * 10;
      ctx.fillStyle = "#4a5262";
      ctx.font = "10px system-ui, sans-serif";
      for (let t = Math.ceil(this.t0 / step) * step; t <= this.t1; t += step) {
        const x = this.x(t);
        if (x < LABEL_W) continue;
        ctx.fillRect(x, AXIS_H - 6, 1, 6);
        ctx.fillText(Invoseq.formatDuration(t), x + 3, AXIS_H - 12);
      }
      ctx.fillText("time since the first call", 6, AXIS_H - 12);
    }

    /* The bar under (x, y), if any: within 3 px in time, the nearest. */
    hitTest(x, y) {
      if (!this.data || x < LABEL_W || y < AXIS_H) return -1;
      const content = y - AXIS_H + this.scrollY;
      const lanes = this.data.lanes;
      for (let l = 0; l < lanes.length; l++) {
        const rowAt = Math.floor((content - this.laneTop[l] - LANE_PAD) / ROW_H);
        if (rowAt < 0 || rowAt >= lanes[l].rows.length) continue;
        const row = lanes[l].rows[rowAt];
        const slack = (3 * (this.t1 - this.t0)) / this.plotW();
        const t = this.t(x);
        let k = Invoseq.firstAbove(row.ends, t - slack);
        let best = -1;
        let distance = Infinity;
        for (; k < row.bars.length && row.starts[k] <= t + slack; k++) {
          const d = t < row.starts[k] ? row.starts[k] - t : t > row.ends[k] ? t - row.ends[k] : 0;
          if (d < distance) {
            best = row.bars[k];
            distance = d;
          }
          if (d === 0) break;
        }
        return best;
      }
      return -1;
    }

    /* Where bar i is drawn, in CSS pixels of the canvas (null when it is off screen). */
    barRect(i) {
      const bars = this.data.bars;
      const x0 = Math.max(LABEL_W, this.x(bars.start[i]));
      const x1 = Math.min(this.width(), this.x(bars.end[i]));
      const y = this.rowY(bars.lane[i], bars.row[i]);
      if (x1 < x0 || y < AXIS_H || y + ROW_H > this.height()) return null;
      return { x: x0, y: y + 1, w: Math.max(1, x1 - x0), h: ROW_H - 2 };
    }

    /* Show bar i: zoom so it fills about half the width, and scroll its lane into view. */
    reveal(i) {
      const bars = this.data.bars;
      const span = Math.max(MIN_SPAN_NS, (bars.end[i] - bars.start[i]) * 2);
      const middle = (bars.start[i] + bars.end[i]) / 2;
      this.t0 = middle - span / 2;
      this.t1 = middle + span / 2;
      const y = this.laneTop[bars.lane[i]] + LANE_PAD + bars.row[i] * ROW_H;
      const visible = this.height() - AXIS_H;
      if (y < this.scrollY || y + ROW_H > this.scrollY + visible) {
        this.scrollY = Math.max(0, y - visible / 3);
      }
      this.requestDraw();
    }

    zoom(factor, atX) {
      const at = this.t(atX);
      const span = Math.min(
        Math.max(MIN_SPAN_NS, (this.t1 - this.t0) * factor),
        this.data.end * 4 + MIN_SPAN_NS
      );
      const share = (atX - LABEL_W) / this.plotW();
      this.t0 = at - share * span;
      this.t1 = this.t0 + span;
      this.requestDraw();
    }

    pan(dx, dy) {
      const dt = (dx / this.plotW()) * (this.t1 - this.t0);
      this.t0 -= dt;
      this.t1 -= dt;
      const maxScroll = Math.max(0, this.contentH - (this.height() - AXIS_H) + ROW_H);
      this.scrollY = Math.min(maxScroll, Math.max(0, this.scrollY - dy));
      this.requestDraw();
    }

    listen() {
      const canvas = this.canvas;
      canvas.addEventListener(
        "wheel",
        (event) => {
          event.preventDefault();
          const rect = canvas.getBoundingClientRect();
          if (event.shiftKey) this.pan(-event.deltaY, 0);
          else this.zoom(Math.exp(event.deltaY * 0.0015), event.clientX - rect.left);
        },
        { passive: false }
      );
      let drag = null;
      canvas.addEventListener("pointerdown", (event) => {
        drag = { x: event.clientX, y: event.clientY, moved: 0 };
        canvas.setPointerCapture(event.pointerId);
      });
      canvas.addEventListener("pointermove", (event) => {
        const rect = canvas.getBoundingClientRect();
        if (drag) {
          const dx = event.clientX - drag.x;
          const dy = event.clientY - drag.y;
          drag.moved += Math.abs(dx) + Math.abs(dy);
          drag.x = event.clientX;
          drag.y = event.clientY;
          if (drag.moved > 3) this.pan(dx, dy);
          return;
        }
        const x = event.clientX - rect.left;
        const y = event.clientY - rect.top;
        this.callbacks.hover(this.hitTest(x, y), event.clientX, event.clientY);
      });
      canvas.addEventListener("pointerup", (event) => {
        const rect = canvas.getBoundingClientRect();
        if (drag && drag.moved <= 3) {
          const hit = this.hitTest(event.clientX - rect.left, event.clientY - rect.top);
          this.callbacks.select(hit);
        }
        drag = null;
      });
      canvas.addEventListener("pointerleave", () => this.callbacks.hover(-1, 0, 0));
    }
  }

  function clip(text, chars) {
    return text.length > chars ? text.slice(0, chars - 1) + "…" : text;
  }

  Invoseq.Timeline = Timeline;
})();
