// api.js: the JSON API of spaced (docs/api.md) with the key the user signed in with.
// The key lives in sessionStorage: it survives reloads of this tab, never other tabs
// or a browser restart, and is sent only as a header to this origin.

const KEY = "space.key";

export function key() { return sessionStorage.getItem(KEY); }
export function setKey(k) { sessionStorage.setItem(KEY, k); }
export function clearKey() { sessionStorage.removeItem(KEY); }

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

// fetch() on the API with the key. Returns the Response (ok or not).
export async function raw(method, path, body, headers = {}) {
  const h = Object.assign({ "Authorization": "Bearer " + (key() || "") }, headers);
  const init = { method, headers: h, cache: "no-store" };
  if (body !== undefined && body !== null) {
    if (typeof body === "string" || body instanceof Blob || body instanceof Uint8Array) {
      init.body = body;
    } else {
      init.body = JSON.stringify(body);
      h["Content-Type"] = "application/json";
    }
  }
  return fetch(path, init);
}

// Throws an ApiError from a failed Response, with the server's message.
export async function fail(r) {
  let code = "http_" + r.status, msg = r.status + " " + r.statusText;
  try {
    const e = (await r.json()).error;
    if (e) { code = e.code; msg = e.message; }
  } catch (_) { /* not JSON: keep the status line */ }
  throw new ApiError(r.status, code, msg);
}

// A JSON call: the parsed body, or throws ApiError. 204 gives null.
export async function call(method, path, body, headers) {
  const r = await raw(method, path, body, headers);
  if (!r.ok) await fail(r);
  if (r.status === 204) return null;
  return r.json();
}

export const get = (path) => call("GET", path);

// Query string from an object, skipping empty values.
export function qs(o) {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(o)) if (v !== undefined && v !== null && v !== "") p.set(k, v);
  const s = p.toString();
  return s ? "?" + s : "";
}
