/* invoseq report: the flame graph (root at the bottom) and the icicle (root on top) of the
 * sequence's profile — calls and sampled frames merged where the same function sits at the
 * same place. Click a frame to zoom into it; wheel zooms, drag pans.
 *
 * Frames are in preorder with next[i] past each subtree, so a frame narrower than half a pixel
 * (or outside the view) skips its whole subtree: its descendants are narrower still. */
"use strict";

(function () {
  const ROW_H = 18;
  const TOP = 4;

  class Flame {
    constructor(canvas, inverted, callbacks) {
      this.canvas = canvas;
      this.ctx = canvas.getContext("2d");
      this.inverted = inverted; // true: icicle
      this.callbacks = callbacks; // {select(index), hover(index, x, y)}
      this.data = null;
      this.v0 = 0;
      this.v1 = 1;
      this.scrollY = 0;
      this.selected = -1;
      this.found = null;
      this.pending = false;
      this.listen();
    }

    setData(data, keepView) {
      this.data = data;
      if (!keepView) this.reset();
      this.requestDraw();
    }

    reset() {
      this.v0 = 0;
      this.v1 = 1;
      this.scrollY = 0;
      this.requestDraw();
    }

    width() {
      return this.canvas.clientWidth;
    }
    height() {
      return this.canvas.clientHeight;
    }
    x(v) {
      return ((v - this.v0) / (this.v1 - this.v0)) * this.width();
    }
    v(x) {
      return this.v0 + (x / this.width()) * (this.v1 - this.v0);
    }
    y(depth) {
      if (this.inverted) return TOP + depth * ROW_H - this.scrollY;
      return this.height() - TOP - (depth + 1) * ROW_H + this.scrollY;
    }

    requestDraw() {
      if (this.pending) return;
      this.pending = true;
      requestAnimationFrame(() => {
        this.pending = false;
        this.draw();
      });
    }

    draw() {
      if (!this.data || !this.canvas.clientWidth) return;
      const dpr = window.devicePixelRatio || 1;
      const w = Math.round(this.canvas.clientWidth * dpr);
      const h = Math.round(this.canvas.clientHeight * dpr);
      if (this.canvas.width !== w || this.canvas.height !== h) {
        this.canvas.width = w;
        this.canvas.height = h;
      }
      const ctx = this.ctx;
      ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
      ctx.clearRect(0, 0, this.width(), this.height());
      ctx.font = "11px system-ui, sans-serif";
      ctx.textBaseline = "middle";
      const f = this.data.flame;
      if (!f.n) {
        ctx.fillStyle = "#4a5262";
        ctx.fillText("Nothing to draw: the sequence has no time or samples yet.", 12, 20);
        return;
      }
      const W = this.width();
      const H = this.height();
      let i = 0;
      while (i < f.n) {
        const x0 = this.x(f.x[i]);
        const x1 = this.x(f.x[i] + f.w[i]);
        const y = this.y(f.depth[i]);
        if (x1 - x0 < 0.5 || x1 < 0 || x0 > W) {
          i = f.next[i];
          continue;
        }
        if (y > -ROW_H && y < H) this.drawFrame(i, Math.max(-2, x0), Math.min(W + 2, x1), y);
        i++;
      }
    }

    drawFrame(i, x0, x1, y) {
      const ctx = this.ctx;
      const f = this.data.flame;
      const name = this.data.names[f.name[i]];
      const kind = this.data.kinds[f.kind[i]];
      const hue = Invoseq.hue(name);
      const w = x1 - x0;
      ctx.globalAlpha = this.found && !this.found.flame[i] ? 0.3 : 1;
      const light = kind === "estimated" ? 86 : 72;
      ctx.fillStyle = "hsl(" + hue + ", " + (kind === "estimated" ? 45 : 60) + "%, " + light + "%)";
      ctx.fillRect(x0, y + 0.5, Math.max(0.5, w - 0.5), ROW_H - 1);
      if (this.found && this.found.flame[i]) {
        ctx.strokeStyle = "#f29e38";
        ctx.lineWidth = 2;
        ctx.strokeRect(x0 + 1, y + 1, Math.max(0, w - 2), ROW_H - 2);
        ctx.lineWidth = 1;
      }
      if (i === this.selected) {
        ctx.strokeStyle = "#111";
        ctx.lineWidth = 2;
        ctx.strokeRect(x0 + 1, y + 1, Math.max(0, w - 2), ROW_H - 2);
        ctx.lineWidth = 1;
      }
      if (w > 28) {
        const chars = Math.floor((w - 8) / 6.2);
        const label = kind === "estimated" ? "~ " + name : name;
        ctx.fillStyle = "#1b1e24";
        const text = label.length > chars ? label.slice(0, Math.max(1, chars - 1)) + "…" : label;
        ctx.fillText(text, Math.max(x0, 0) + 4, y + ROW_H / 2 + 0.5);
      }
      ctx.globalAlpha = 1;
    }

    hitTest(x, y) {
      if (!this.data) return -1;
      const f = this.data.flame;
      const v = this.v(x);
      const depth = this.inverted
        ? Math.floor((y - TOP + this.scrollY) / ROW_H)
        : Math.floor((this.height() - TOP + this.scrollY - y) / ROW_H);
      let i = 0;
      while (i < f.n) {
        if (v < f.x[i] || v > f.x[i] + f.w[i]) {
          i = f.next[i];
          continue;
        }
        if (f.depth[i] === depth) return i;
        i++;
      }
      return -1;
    }

    focus(i) {
      const f = this.data.flame;
      if (i < 0 || f.w[i] <= 0) return;
      this.v0 = f.x[i];
      this.v1 = f.x[i] + f.w[i];
      this.requestDraw();
    }

    listen() {
      const canvas = this.canvas;
      canvas.addEventListener(
        "wheel",
        (event) => {
          event.preventDefault();
          const rect = canvas.getBoundingClientRect();
          const at = this.v(event.clientX - rect.left);
          const span = Math.min(1, Math.max(1e-9, (this.v1 - this.v0) * Math.exp(event.deltaY * 0.0015)));
          const share = (event.clientX - rect.left) / this.width();
          this.v0 = Math.max(0, Math.min(1 - span, at - share * span));
          this.v1 = this.v0 + span;
          this.requestDraw();
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
          if (drag.moved > 3) {
            const dv = (dx / this.width()) * (this.v1 - this.v0);
            const span = this.v1 - this.v0;
            this.v0 = Math.max(0, Math.min(1 - span, this.v0 - dv));
            this.v1 = this.v0 + span;
            this.scrollY = Math.max(0, this.scrollY + (this.inverted ? -dy : dy));
            this.requestDraw();
          }
          return;
        }
        this.callbacks.hover(
          this.hitTest(event.clientX - rect.left, event.clientY - rect.top),
          event.clientX,
          event.clientY
        );
      });
      canvas.addEventListener("pointerup", (event) => {
        const rect = canvas.getBoundingClientRect();
        if (drag && drag.moved <= 3) {
          const hit = this.hitTest(event.clientX - rect.left, event.clientY - rect.top);
          if (hit >= 0) this.focus(hit);
          this.callbacks.select(hit);
        }
        drag = null;
      });
      canvas.addEventListener("pointerleave", () => this.callbacks.hover(-1, 0, 0));
    }
  }

  Invoseq.Flame = Flame;
})();
