// sandbox.js: one sandbox's page: overview and actions, terminal, files, the gateway's
// decision log (its egress), CPU and memory. #/sandbox/ID[/TAB]
import * as api from "./api.js";
import { h, table, badge, flash, ago, bytes } from "./ui.js";
import { poll, actions } from "./lists.js";
import { terminalView } from "./term.js";
import { filesView } from "./files.js";
import { chart } from "./chart.js";

const TABS = ["overview", "terminal", "files", "network", "metrics"];

function overview(el, id) {
  const body = h("div", {});
  el.append(body);
  return poll(async () => {
    const s = (await api.get("/v1/sandboxes/" + id)).sandbox;
    const kv = [
      ["State", h("span", {}, badge(s.state), " (heading for " + s.desired_state + ")")],
      ["Template", s.template], ["Size", s.vcpus + " vCPU, " + s.memory_mib + " MiB"],
      ["Network", s.network ? JSON.stringify(s.network) : ""],
      ["Timeout", s.timeout ? s.timeout + " s, then " + s.on_timeout : "none"],
      ["Expires", s.expires_at || "never"], ["Created", s.created_at + " (" + ago(s.created_at) + ")"],
      ["Node", s.node || "local"], ["Metadata", JSON.stringify(s.metadata || {})],
    ];
    if (s.failure) kv.push(["Failure", h("span", { class: "error" }, s.failure)]);
    body.replaceChildren(h("div", { class: "toolbar" }, actions(s)),
      h("dl", { class: "kv" }, kv.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])));
  });
}

// The decision log grows; only entries after the last seen sequence number are fetched.
function network(el, id) {
  const rows = [];
  const body = h("div", { id: "netlog" });
  el.append(h("p", { class: "muted" }, "What the sandbox's gateway allowed or refused (DNS, TLS, HTTP), newest first."), body);
  let since = 0;
  return poll(async () => {
    const r = await api.get("/v1/sandboxes/" + id + "/network/log" + api.qs({ since }));
    for (const e of r.entries) {
      since = Math.max(since, e.seq);
      rows.unshift([new Date(e.ts_ms).toLocaleTimeString(), e.kind,
        h("span", { class: e.allowed ? "ok" : "error" }, e.allowed ? "allowed" : "refused"),
        h("span", { class: "mono" }, e.name || ""), (e.dst || "") + (e.port ? ":" + e.port : ""), e.reason || ""]);
    }
    rows.splice(500);
    body.replaceChildren(table(["Time", "Kind", "Decision", "Name", "Destination", "Reason"], rows,
      "No decisions logged (a sandbox without network makes none)."));
  });
}

// One sample per poll from the agent (the E2B metrics route: the only one that has them).
function metrics(el, id) {
  const cpu = [], mem = [];
  const cpuBox = h("div", { class: "chart" }), memBox = h("div", { class: "chart" });
  const note = h("p", { class: "muted" });
  el.append(note, h("div", { class: "charts" }, cpuBox, memBox));
  return poll(async () => {
    const r = await api.call("GET", "/sandboxes/" + id + "/metrics", null, { "X-API-Key": api.key() });
    const m = r[r.length - 1];
    if (!m) { note.textContent = "No sample: the sandbox is not running."; return; }
    note.textContent = m.cpuCount + " vCPU, memory " + bytes(m.memUsed) + " of " + bytes(m.memTotal) +
      ", disk " + bytes(m.diskUsed) + " of " + bytes(m.diskTotal);
    cpu.push(m.cpuUsedPct); mem.push((100 * m.memUsed) / m.memTotal);
    cpu.splice(0, cpu.length - 60); mem.splice(0, mem.length - 60);
    cpuBox.replaceChildren(chart("CPU %", cpu)); memBox.replaceChildren(chart("Memory %", mem));
  });
}

const VIEWS = { overview, terminal: terminalView, files: filesView, network, metrics };

export function sandboxPage(el, args) {
  const id = args[0];
  if (!/^sb[0-9a-f]{16}$/.test(id || "")) { flash("not a sandbox id: " + id, true); return null; }
  const tab = TABS.includes(args[1]) ? args[1] : "overview";
  const view = h("div", { class: "view", id: "view-" + tab });
  el.append(h("h1", {}, h("a", { href: "#/sandboxes" }, "Sandboxes"), " / ", h("span", { class: "mono" }, id)),
    h("div", { class: "tabs" }, TABS.map((t) =>
      h("a", { href: "#/sandbox/" + id + "/" + t, class: t === tab ? "active" : "" }, t))), view);
  return VIEWS[tab](view, id) || null;
}
