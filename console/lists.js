// lists.js: the list pages (sandboxes, operations, templates, nodes). The sandbox,
// operation and template pages follow the tenant's event stream (GET /v1/events) and
// re-read their list at once when an event concerns it, with a slow poll (SLOW_MS) as
// the fallback for events missed while the stream is down (it reconnects after SLOW_MS).
// A daemon that refuses the stream (a cluster control: 501) is polled every POLL_MS.
// The nodes page polls every POLL_MS (its load charts want a sample each time). A
// refresh asked for while one runs runs once more after it, never twice at a time.
import * as api from "./api.js";
import { readEvents } from "./sse.js";
import { h, table, badge, flash, ago, bytes } from "./ui.js";
import { chart } from "./chart.js";

const POLL_MS = 2000;
const SLOW_MS = 15000;

// Runs fn now, whenever the returned kick() is called and every ms; kicks during a run
// make one more run. Returns { kick, stop }.
function refresher(fn, ms) {
  let busy = false, again = false, stopped = false;
  const kick = async () => {
    if (stopped) return;
    if (busy) { again = true; return; }
    busy = true;
    try { await fn(); } catch (e) { if (e.status === 401) throw e; flash(e.message, true); }
    finally { busy = false; }
    if (again) { again = false; kick(); }
  };
  kick();
  const t = setInterval(kick, ms);
  return { kick, stop: () => { stopped = true; clearInterval(t); } };
}

// Runs fn now and every POLL_MS; returns the stop function.
export function poll(fn) {
  return refresher(fn, POLL_MS).stop;
}

// Runs fn now, on every event whose data.kind is in kinds (docs/api.md, "Events") and
// every SLOW_MS; returns the stop function.
export function live(fn, kinds) {
  let r = refresher(fn, SLOW_MS);
  let stopStream = null, retry = null, stopped = false;
  const connect = () => {
    retry = null;
    stopStream = readEvents("/v1/events", api.key() || "", (name, data) => {
      if (kinds.includes(data.kind)) r.kick();
    }, (err) => {
      if (stopped) return;
      if (err && err.status === 501) { // no stream here (a cluster control): poll as before
        r.stop();
        r = refresher(fn, POLL_MS);
        return;
      }
      // the stream ended (too slow, server restart, network): poll slowly, try again later
      retry = setTimeout(() => { r.kick(); connect(); }, SLOW_MS);
    });
  };
  connect();
  return () => {
    stopped = true;
    r.stop();
    if (stopStream) stopStream();
    if (retry) clearTimeout(retry);
  };
}

// Verbs a sandbox in this state accepts (docs/api.md, "Lifecycle verbs").
const VERBS = {
  running: ["pause", "suspend", "fork"],
  paused: ["resume", "suspend"],
  suspended: ["restore"],
  stopped: ["start"],
  failed: ["start"],
};

// Delete takes two clicks: the first arms the sandbox's delete button for ARM_MS (kept
// here, not in the button, since the list is redrawn at every refresh; the click marks
// the button itself too, as the next redraw may be a while away).
const ARM_MS = 4000;
const armed = new Map(); // sandbox id -> time its delete button disarms

// Starts a verb on a sandbox and reports it; the list shows the new state when its
// events arrive.
export async function act(id, verb) {
  if (verb === "delete") {
    if (!(armed.get(id) > Date.now())) {
      armed.set(id, Date.now() + ARM_MS);
      flash("click delete again to delete " + id + " (its disk and files are removed)");
      return;
    }
    armed.delete(id);
    await api.call("DELETE", "/v1/sandboxes/" + id);
  } else if (verb === "fork") {
    const r = await api.call("POST", "/v1/sandboxes/" + id + "/fork", { count: 1 });
    flash("fork of " + id + ": " + r.sandboxes.join(", "));
    return;
  } else {
    await api.call("POST", "/v1/sandboxes/" + id + "/" + verb);
  }
  flash(verb + " " + id + " accepted");
}

export function actions(s) {
  const btn = (verb, cls) => h("button", {
    class: "small " + (cls || ""), "data-verb": verb,
    onclick: (ev) => act(s.id, verb).then(() => {
      if (verb === "delete") ev.target.classList.toggle("armed", armed.get(s.id) > Date.now());
    }).catch((e) => flash(e.message, true)),
  }, verb);
  return h("span", { class: "actions" },
    (VERBS[s.state] || []).map((v) => btn(v)),
    s.state === "running" && h("a", { class: "button small", href: "#/sandbox/" + s.id + "/terminal" }, "terminal"),
    s.state !== "deleting" && btn("delete", armed.get(s.id) > Date.now() ? "danger armed" : "danger"));
}

function createForm(onCreated) {
  const tpl = h("select", { id: "create-template", name: "template" });
  const vcpus = h("input", { id: "create-vcpus", type: "number", min: 1, max: 16, placeholder: "default" });
  const mem = h("input", { id: "create-memory", type: "number", min: 128, max: 65536, step: 128, placeholder: "default" });
  const net = h("select", { id: "create-network" },
    h("option", { value: "none" }, "no network"), h("option", { value: "open" }, "open network"));
  api.get("/v1/templates").then((r) => {
    for (const t of r.templates.filter((x) => x.state === "ready"))
      tpl.append(h("option", { value: t.name }, t.name));
  }).catch((e) => flash(e.message, true));
  const form = h("form", { id: "create", class: "toolbar" },
    h("label", {}, "Template ", tpl), h("label", {}, "vCPUs ", vcpus),
    h("label", {}, "Memory MiB ", mem), h("label", {}, "Network ", net),
    h("button", { type: "submit" }, "Create sandbox"));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const body = { template: tpl.value, network: { mode: net.value } };
    if (vcpus.value) body.vcpus = Number(vcpus.value);
    if (mem.value) body.memory_mib = Number(mem.value);
    try {
      const r = await api.call("POST", "/v1/sandboxes", body);
      flash("creating " + r.sandbox.id);
      onCreated();
    } catch (e) { flash(e.message, true); }
  });
  return form;
}

export function sandboxesPage(el) {
  const list = h("div", { id: "sandbox-list" });
  const refresh = async () => {
    const r = await api.get("/v1/sandboxes?limit=1000");
    list.replaceChildren(table(
      ["Sandbox", "Template", "State", "Size", "Node", "Created", ""],
      r.sandboxes.map((s) => [
        h("a", { href: "#/sandbox/" + s.id, class: "mono" }, s.id), s.template,
        h("span", {}, badge(s.state), s.failure ? h("span", { class: "muted" }, " " + s.failure) : null),
        s.vcpus + " vCPU, " + s.memory_mib + " MiB", s.node || "local", ago(s.created_at), actions(s),
      ]), "No sandboxes yet: create one above."));
  };
  el.append(h("h1", {}, "Sandboxes"), createForm(refresh), list);
  return live(refresh, ["sandbox", "operation"]);
}

// A page of one list: render() returns the list's content (a node). kinds: the event
// kinds that refresh it (live), or null to poll every POLL_MS.
function listPage(el, title, kinds, render) {
  const list = h("div", {});
  el.append(h("h1", {}, title), list);
  const fn = async () => list.replaceChildren(await render());
  return kinds ? live(fn, kinds) : poll(fn);
}

export function operationsPage(el) {
  return listPage(el, "Operations", ["operation"], async () => {
    const r = await api.get("/v1/operations?limit=100");
    return table(
      ["Operation", "Kind", "Target", "State", "Progress", "Detail", "Created"],
      r.operations.map((o) => [
        h("span", { class: "mono" }, o.id), o.kind,
        o.sandbox_id ? h("a", { href: "#/sandbox/" + o.sandbox_id, class: "mono" }, o.sandbox_id) : (o.template || ""),
        badge(o.state), h("progress", { max: 100, value: o.progress }),
        o.error ? h("span", { class: "error" }, o.error.code + ": " + o.error.message) : (o.detail || ""),
        ago(o.created_at),
      ]), "No operations yet.");
  });
}

export function templatesPage(el) {
  return listPage(el, "Templates", ["operation"], async () => {
    const r = await api.get("/v1/templates");
    return table(
      ["Template", "State", "Kind", "Description", "Snapshots"],
      r.templates.map((t) => [
        h("span", { class: "mono" }, t.name), badge(t.state), t.builtin ? "built-in" : "yours",
        t.failure ? h("span", { class: "error" }, t.failure) : (t.description || ""), String(t.snapshots ?? ""),
      ]), "No templates.");
  });
}

// A used/total bar: "3 / 8 vCPU".
function meter(used, total, unit) {
  const pct = total ? Math.min(100, Math.round((100 * used) / total)) : 0;
  return h("span", { class: "meter" }, h("meter", { min: 0, max: 100, value: pct }), " " + used + " / " + total + " " + unit);
}

// Measured load (GET /v1/nodes: `host`, each node's `load`), not allocation: "load 0.52
// 0.40 0.31, CPU 12.5 % of 2, 1.2 GiB of 3.8 GiB free".
function load(l) {
  if (!l) return h("span", { class: "muted" }, "not reported yet");
  return h("span", { class: "load" }, "load " + [l.load1, l.load5, l.load15].map((v) => v.toFixed(2)).join(" ") +
    ", CPU " + l.cpu_pct.toFixed(1) + " % of " + l.cpus + ", " + bytes(l.mem_available) + " of " +
    bytes(l.mem_total) + " free");
}

// The last 60 load samples per host ("host" for this spaced's own, else a node id), kept
// while the console is open, for the charts under the nodes table.
const loadHistory = new Map();

function loadCharts(key, title, l) {
  if (!l) return null;
  let e = loadHistory.get(key);
  if (!e) loadHistory.set(key, (e = { cpu: [], mem: [] }));
  e.cpu.push(l.cpu_pct);
  e.mem.push(l.mem_total ? 100 * (1 - l.mem_available / l.mem_total) : 0);
  for (const a of [e.cpu, e.mem]) if (a.length > 60) a.shift();
  return h("div", { class: "node-charts", "data-host": key },
    h("h3", {}, title), h("div", { class: "charts" }, chart("CPU %", e.cpu), chart("Memory used %", e.mem)));
}

export function nodesPage(el) {
  return listPage(el, "Nodes", null, async () => {
    const r = await api.raw("GET", "/v1/nodes");
    if (r.status === 403) return h("p", { class: "empty" }, "Listing nodes needs an admin key.");
    if (!r.ok) await api.fail(r);
    const body = await r.json();
    return h("div", {},
      h("p", { id: "host-load" }, "This host: ", load(body.host)),
      table(
        ["Node", "State", "vCPUs used", "Memory used", "Host load", "Heartbeat", "URL"],
        body.nodes.map((n) => [
          h("span", { class: "mono" }, n.id),
          badge(n.live ? (n.draining ? "draining" : "live") : "down"),
          meter(n.used.vcpus, n.capacity.vcpus, "vCPU"),
          meter(n.used.memory_mib, n.capacity.memory_mib, "MiB"),
          load(n.load),
          ago(n.heartbeat_at), h("span", { class: "mono" }, n.url),
        ]), "No nodes: this spaced runs its sandboxes on its own host (see docs/multinode.md)."),
      loadCharts("host", "This host", body.host),
      body.nodes.map((n) => loadCharts(n.id, "Node " + n.id, n.load)));
  });
}
