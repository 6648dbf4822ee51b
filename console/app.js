// app.js: sign-in and the page router of the space web console (docs/console.md).
// Pages live in the URL's hash (#/sandboxes, #/sandbox/sb.../terminal, ...), so a reload
// or a shared link opens the same view. Each page is a function(el, args) that fills el
// and may return a stop function, called when the user leaves (timers, streams).
import * as api from "./api.js";
import { flash } from "./ui.js";
import { sandboxesPage, operationsPage, templatesPage, nodesPage } from "./lists.js";
import { sandboxPage } from "./sandbox.js";

const pages = {
  sandboxes: sandboxesPage,
  operations: operationsPage,
  templates: templatesPage,
  nodes: nodesPage,
  sandbox: sandboxPage,
};

let stopPage = null;

function route() {
  if (stopPage) { stopPage(); stopPage = null; }
  const page = document.getElementById("page");
  page.replaceChildren();
  if (!api.key()) { showSignin(true); return; }
  showSignin(false);
  const parts = location.hash.replace(/^#\/?/, "").split("/").filter(Boolean).map(decodeURIComponent);
  const name = pages[parts[0]] ? parts[0] : "sandboxes";
  for (const a of document.querySelectorAll("#nav a"))
    a.classList.toggle("active", a.dataset.page === (name === "sandbox" ? "sandboxes" : name));
  try {
    stopPage = pages[name](page, parts.slice(1)) || null;
  } catch (e) {
    flash(e.message, true);
  }
}

function showSignin(show) {
  document.getElementById("signin").hidden = !show;
  document.getElementById("nav").hidden = show;
  document.getElementById("signout").hidden = show;
  if (show) document.getElementById("key").focus();
}

// Checks the key with a cheap authenticated call before keeping it.
async function signin(ev) {
  ev.preventDefault();
  const input = document.getElementById("key");
  const err = document.getElementById("signin-error");
  api.setKey(input.value.trim());
  try {
    await api.get("/v1/quota");
    input.value = "";
    err.textContent = "";
    route();
  } catch (e) {
    api.clearKey();
    err.textContent = e.status === 401 ? "That key is not valid." : e.message;
  }
}

// A 401 anywhere (key revoked or expired) sends the user back to sign in.
window.addEventListener("unhandledrejection", (ev) => {
  const e = ev.reason;
  if (e && e.status === 401) { api.clearKey(); route(); }
  else if (e && e.message) flash(e.message, true);
});

document.getElementById("signin").addEventListener("submit", signin);
document.getElementById("signout").addEventListener("click", () => { api.clearKey(); route(); });
window.addEventListener("hashchange", route);
route();
