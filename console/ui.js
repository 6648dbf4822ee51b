// ui.js: DOM helpers. Everything that comes from the API (names, metadata, file names,
// log lines: a sandbox controls some of them) is inserted as text, never as HTML.

// h("div", {class: "x", onclick: fn}, "text", child, ...)
export function h(tag, attrs, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else if (v === true) el.setAttribute(k, "");
    else el.setAttribute(k, String(v));
  }
  for (const c of kids.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

export function clear(el) { while (el.firstChild) el.firstChild.remove(); return el; }

// A table from column titles and rows of cells (strings or nodes).
export function table(cols, rows, empty) {
  if (!rows.length) return h("p", { class: "empty" }, empty || "Nothing here.");
  return h("table", {},
    h("thead", {}, h("tr", {}, cols.map((c) => h("th", {}, c)))),
    h("tbody", {}, rows.map((r) => h("tr", {}, r.map((c) => h("td", {}, c))))));
}

export function badge(state) { return h("span", { class: "badge s-" + state }, state); }

let flashTimer = null;
// A message at the top of the page; errors stay until the next message.
export function flash(msg, isError) {
  const f = document.getElementById("flash");
  f.textContent = msg;
  f.className = isError ? "error" : "info";
  f.hidden = false;
  clearTimeout(flashTimer);
  if (!isError) flashTimer = setTimeout(() => { f.hidden = true; }, 4000);
}

// "3 min ago" from an RFC 3339 time.
export function ago(t) {
  if (!t) return "";
  const s = Math.max(0, (Date.now() - Date.parse(t)) / 1000);
  if (s < 60) return Math.floor(s) + " s ago";
  if (s < 3600) return Math.floor(s / 60) + " min ago";
  if (s < 86400) return Math.floor(s / 3600) + " h ago";
  return Math.floor(s / 86400) + " d ago";
}

export function bytes(n) {
  if (n === undefined || n === null) return "";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + " " + u[i];
}
