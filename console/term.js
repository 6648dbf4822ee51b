// term.js: a terminal in the browser on a PTY session (docs/api.md, "Sessions"): the
// same protocol as `space shell` (src/cli/cli_shell.c). The session runs the user's
// login shell on a pty of the terminal's size; its output stream is read with the
// session's attach token; keystrokes are POSTed to .../stdin (one upload at a time, as
// the API requires: what is typed meanwhile is sent with the next one); a size change
// of the page becomes POST .../resize. Leaving the page deletes the session (its shell
// is killed), so closed tabs leave nothing running.
import { Terminal } from "./vendor/xterm.mjs";
import { FitAddon } from "./vendor/addon-fit.mjs";
import * as api from "./api.js";
import { h } from "./ui.js";
import { readEvents } from "./sse.js";

const THEME = { background: "#0f172a", foreground: "#e2e8f0", cursor: "#93c5fd", selectionBackground: "#334155" };

function b64bytes(s) {
  const bin = atob(s);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

export function terminalView(el, id) {
  const status = h("span", { class: "muted", id: "term-status" }, "starting a shell...");
  // The fit addon sizes the terminal to its parent's content box: the padding and
  // background are on an outer frame.
  const box = h("div", { class: "term-box", id: "terminal" });
  el.append(h("div", { class: "toolbar" }, status), h("div", { class: "term" }, box));
  const term = new Terminal({
    cursorBlink: true, fontSize: 14, theme: THEME, scrollback: 5000,
    fontFamily: "ui-monospace, 'DejaVu Sans Mono', Menlo, Consolas, monospace",
  });
  const fit = new FitAddon();
  term.loadAddon(fit);
  term.open(box);
  fit.fit();

  const enc = new TextEncoder();
  let base = null, token = null, started = false, ended = false, pending = "", sending = false;
  let stopStream = () => {};

  const post = (verb, body) => api.raw("POST", base + "/" + verb, body, { Authorization: "Bearer " + token });

  async function pump() {
    if (sending || !started || ended || !pending) return;
    sending = true;
    try {
      while (pending && !ended) {
        const data = pending;
        pending = "";
        const r = await post("stdin", enc.encode(data));
        if (r.status === 409) { ended = true; break; } // stdin closed: the shell is ending
        if (!r.ok) await api.fail(r);
      }
    } catch (e) {
      status.textContent = "input failed: " + e.message;
    } finally {
      sending = false;
    }
  }

  const resize = () => { if (started && !ended) post("resize", { rows: term.rows, cols: term.cols }); };
  const onWindow = () => fit.fit();
  window.addEventListener("resize", onWindow);
  term.onResize(resize);
  term.onData((d) => { pending += d; pump(); });

  (async () => {
    try {
      const s = await api.call("POST", "/v1/sandboxes/" + id + "/sessions", {
        cmd: 'exec "${SHELL:-/bin/sh}" -l', pty: { rows: term.rows, cols: term.cols },
        stdin: true, tag: "console", token_ttl: 86400,
      });
      base = "/v1/sandboxes/" + id + "/sessions/" + s.id;
      token = s.attach_token;
      stopStream = readEvents(s.attach_url, token, (name, data) => {
        if (name === "start") {
          started = true;
          status.textContent = "shell running (pid " + data.pid + ")";
          resize();
          pump();
        } else if (name === "stdout" || name === "stderr") {
          term.write(b64bytes(data.data));
        } else if (name === "exit") {
          ended = true;
          status.textContent = data.code !== null ? "shell exited with code " + data.code : "shell killed by signal " + data.signal;
          term.write("\r\n\x1b[2m[" + status.textContent + "]\x1b[0m\r\n");
          return true;
        } else if (name === "error") {
          ended = true;
          status.textContent = "session error: " + data.message;
          return true;
        }
        return false;
      }, (err) => { if (err) status.textContent = "output stream lost: " + err.message; });
      term.focus();
    } catch (e) {
      status.textContent = "cannot start a shell: " + e.message;
    }
  })();

  return () => {
    window.removeEventListener("resize", onWindow);
    stopStream();
    if (base) api.call("DELETE", base).catch(() => {});
    term.dispose();
  };
}
