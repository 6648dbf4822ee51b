// sse.js: reads a Server-Sent Events stream with fetch(), so the session's attach token
// travels in the Authorization header (EventSource can only put it in the URL, where
// proxies and logs keep it). Calls onEvent(name, data, id) per event; resumes after a
// dropped connection with Last-Event-ID, so no output is lost or repeated
// (docs/api.md, "Attach"). onEnd(err) once at the end: err null when the server ended
// the stream, else an Error (with .status when the server refused it). Also reads
// GET /v1/events with the API key (lists.js). Returns the stop function.
export function readEvents(url, token, onEvent, onEnd) {
  const ctl = new AbortController();
  let lastId = null, tries = 0, done = false;
  const finish = (err) => { if (!done) { done = true; onEnd(err); } };

  async function once() {
    const headers = { Authorization: "Bearer " + token };
    if (lastId !== null) headers["Last-Event-ID"] = lastId;
    const r = await fetch(url, { headers, signal: ctl.signal, cache: "no-store" });
    if (!r.ok) {
      let msg = r.status + " " + r.statusText;
      try { msg = (await r.json()).error.message; } catch (_) { /* keep the status */ }
      throw Object.assign(new Error(msg), { fatal: true, status: r.status });
    }
    tries = 0;
    const reader = r.body.getReader();
    const dec = new TextDecoder();
    let buf = "", ev = { name: "message", data: [], id: null };
    for (;;) {
      const { value, done: end } = await reader.read();
      if (end) return;
      buf += dec.decode(value, { stream: true });
      let nl;
      while ((nl = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, nl).replace(/\r$/, "");
        buf = buf.slice(nl + 1);
        if (line === "") { // end of one event
          if (ev.id !== null) lastId = ev.id;
          if (ev.data.length) {
            const stop = onEvent(ev.name, JSON.parse(ev.data.join("\n")), ev.id);
            if (stop) { finish(null); ctl.abort(); return; }
          }
          ev = { name: "message", data: [], id: null };
          continue;
        }
        if (line.startsWith(":")) continue; // keepalive comment
        const c = line.indexOf(":");
        const field = c < 0 ? line : line.slice(0, c);
        const val = c < 0 ? "" : line.slice(c + 1).replace(/^ /, "");
        if (field === "event") ev.name = val;
        else if (field === "data") ev.data.push(val);
        else if (field === "id") ev.id = val;
      }
    }
  }

  (async () => {
    while (!done) {
      try {
        await once();
        if (done) return;
        finish(null); // the server ended the stream (after exit or error)
      } catch (e) {
        if (done || ctl.signal.aborted) return;
        if (e.fatal || ++tries > 5) { finish(e); return; }
        await new Promise((res) => setTimeout(res, 1000 * tries));
      }
    }
  })();
  return () => { done = true; ctl.abort(); };
}
