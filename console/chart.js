// chart.js: a small line chart of the last samples (0..100 %), drawn as SVG elements.
const NS = "http://www.w3.org/2000/svg";
const W = 360, H = 120;

function svg(tag, attrs) {
  const el = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  return el;
}

export function chart(title, values) {
  const box = document.createElement("figure");
  const cap = document.createElement("figcaption");
  const last = values.length ? values[values.length - 1] : 0;
  cap.textContent = title + ": " + last.toFixed(1);
  const s = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "spark", role: "img" });
  for (const y of [0, 50, 100]) s.append(svg("line", { x1: 0, x2: W, y1: H - (y * H) / 100, y2: H - (y * H) / 100, class: "grid" }));
  const step = W / 59;
  const pts = values.map((v, i) => `${(W - (values.length - 1 - i) * step).toFixed(1)},${(H - (Math.min(100, Math.max(0, v)) * H) / 100).toFixed(1)}`);
  if (pts.length) {
    const first = pts[0].split(",")[0], lastX = pts[pts.length - 1].split(",")[0];
    s.append(svg("polygon", { points: `${first},${H} ${pts.join(" ")} ${lastX},${H}`, class: "area" }));
    s.append(svg("polyline", { points: pts.join(" "), class: "line" }));
    const [x, y] = pts[pts.length - 1].split(",");
    s.append(svg("circle", { cx: x, cy: y, r: 3, class: "dot" }));
  }
  box.append(cap, s);
  return box;
}
