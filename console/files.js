// files.js: a file browser on the files API (docs/api.md, "Files"): list a directory,
// open subdirectories, download a file (fetched with the key, then saved from memory),
// upload files into the directory shown.
import * as api from "./api.js";
import { h, table, flash, bytes } from "./ui.js";

export function filesView(el, id) {
  const base = "/v1/sandboxes/" + id + "/files";
  const path = h("input", { id: "files-path", value: "/home/user", spellcheck: "false" });
  const up = h("input", { id: "files-upload", type: "file", multiple: true });
  const list = h("div", { id: "files-list" });
  let cwd = "/home/user";

  const join = (dir, name) => (dir.endsWith("/") ? dir : dir + "/") + name;
  const parent = (p) => p.replace(/\/[^/]+\/?$/, "") || "/";

  async function show(p) {
    const r = await api.get(base + "/list" + api.qs({ path: p, depth: 1 }));
    cwd = p;
    path.value = p;
    const rows = r.entries.filter((e) => e.path !== p)
      .sort((a, b) => (a.type === "dir") - (b.type === "dir") ? (b.type === "dir") - (a.type === "dir") : a.name.localeCompare(b.name));
    const up1 = p === "/" ? [] : [[h("a", { href: "#", onclick: (ev) => { ev.preventDefault(); go(parent(p)); } }, ".."), "", "", ""]];
    list.replaceChildren(table(["Name", "Size", "Owner", "Mode"], up1.concat(rows.map((e) => [
      e.type === "dir"
        ? h("a", { href: "#", class: "dir", onclick: (ev) => { ev.preventDefault(); go(join(p, e.name)); } }, e.name + "/")
        : h("a", { href: "#", class: "file", onclick: (ev) => { ev.preventDefault(); download(join(p, e.name), e.name); } }, e.name),
      e.type === "dir" ? "" : bytes(e.size), e.owner || String(e.uid), "0" + (e.mode & 0o7777).toString(8),
    ])), "Empty directory."));
  }
  const go = (p) => show(p).catch((e) => flash(e.message, true));

  async function download(p, name) {
    const r = await api.raw("GET", base + api.qs({ path: p }));
    if (!r.ok) return api.fail(r).catch((e) => flash(e.message, true));
    const url = URL.createObjectURL(await r.blob());
    const a = h("a", { href: url, download: name });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  }

  up.addEventListener("change", async () => {
    for (const f of up.files) {
      try {
        await api.call("PUT", base + api.qs({ path: join(cwd, f.name) }), f, { "Content-Type": "application/octet-stream" });
        flash("uploaded " + f.name);
      } catch (e) { flash(f.name + ": " + e.message, true); }
    }
    up.value = "";
    go(cwd);
  });
  path.addEventListener("keydown", (ev) => { if (ev.key === "Enter") go(path.value); });
  el.append(h("div", { class: "toolbar" },
    h("label", {}, "Path ", path),
    h("button", { class: "small", onclick: () => go(path.value) }, "Open"),
    h("label", { class: "button small" }, "Upload", up)), list);
  go(cwd);
}
