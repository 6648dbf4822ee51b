// Shared helpers for the E2B compatibility scripts. Each script is run by
// test_e2b_sdk.py as `node <script> <sdk package>` with E2B_API_URL, E2B_SANDBOX_URL,
// E2B_API_KEY pointing at a spaced, prints one "ok <step>" line per passed step and
// exits non-zero with the failing step's error otherwise.
import assert from 'node:assert/strict'

export { assert }
export const sdkName = process.argv[2] || 'e2b'
export const sdk = await import(sdkName)
export const { Sandbox } = sdk
export const sdkVersion = (await import(sdkName + '/package.json', { with: { type: 'json' } })).default.version
export const runId = `r${process.pid}${Date.now() % 100000}`

let current = '(setup)'
export async function step(name, fn) {
  current = name
  const t0 = Date.now()
  await fn()
  console.log(`ok ${name} (${Date.now() - t0} ms)`)
}

// Runs body; always kills the sandboxes it registered; reports the failing step.
const cleanup = []
export function killLater(sbx) {
  cleanup.push(sbx)
  return sbx
}
export async function main(body) {
  let code = 0
  try {
    await body()
  } catch (e) {
    console.error(`FAIL ${current}: ${e && e.stack ? e.stack : e}`)
    code = 1
  }
  for (const s of cleanup) await s.kill().catch(() => {})
  process.exit(code)
}

export async function rejectsWith(promise, cls, test) {
  try {
    await promise
  } catch (e) {
    assert.ok(e instanceof cls, `expected ${cls.name}, got ${e && e.constructor && e.constructor.name}: ${e && e.message}`)
    if (test) test(e)
    return e
  }
  assert.fail(`expected ${cls.name}, but the call succeeded`)
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

// Polls fn until it returns a truthy value (bounded by a generous deadline so slow
// TCG machines never fail on timing).
export async function eventually(fn, what, timeoutMs = 60000) {
  const end = Date.now() + timeoutMs
  for (;;) {
    const v = await fn()
    if (v) return v
    if (Date.now() > end) assert.fail(`timed out waiting for ${what}`)
    await sleep(200)
  }
}

export const api = process.env.E2B_API_URL
export const apiKey = process.env.E2B_API_KEY

// Raw HTTP to spaced for the bad-input checks the SDK cannot produce.
export async function raw(path, { method = 'POST', headers = {}, body } = {}) {
  const r = await fetch(api + path, { method, headers, body })
  const text = await r.text()
  let json = null
  try { json = JSON.parse(text) } catch { /* not JSON */ }
  return { status: r.status, headers: r.headers, text, json }
}
