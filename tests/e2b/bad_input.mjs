// envd bad input against a live sandbox: wrong/missing tokens, malformed Connect
// envelopes, wrong content types, oversized frames, unknown methods. Every answer must
// have the shape the SDK expects and the sandbox must keep working afterwards.
import { assert, Sandbox, step, main, killLater, raw } from './lib.mjs'

function envelope(flags, payload) {
  const body = Buffer.from(payload)
  const b = Buffer.alloc(5 + body.length)
  b[0] = flags
  b.writeUInt32BE(body.length, 1)
  body.copy(b, 5)
  return b
}

// Parses a connect+json stream body into [{flags, json}].
function frames(buf) {
  const out = []
  for (let i = 0; i + 5 <= buf.length;) {
    const n = buf.readUInt32BE(i + 1)
    out.push({ flags: buf[i], json: JSON.parse(buf.subarray(i + 5, i + 5 + n).toString()) })
    i += 5 + n
  }
  return out
}

await main(async () => {
  const sbx = killLater(await Sandbox.create('base', { timeoutMs: 300_000 }))
  const id = sbx.sandboxId
  const token = sbx.envdAccessToken
  assert.ok(token, 'the SDK received an envdAccessToken')
  const H = (extra = {}) => ({ 'E2b-Sandbox-Id': id, 'Connect-Protocol-Version': '1', ...extra })
  const stream = async (path, body, headers = {}) => {
    const r = await fetch(process.env.E2B_SANDBOX_URL + path, { method: 'POST', body,
      headers: H({ 'Content-Type': 'application/connect+json', 'X-Access-Token': token, ...headers }) })
    return { status: r.status, ctype: r.headers.get('content-type'), frames: frames(Buffer.from(await r.arrayBuffer())) }
  }

  await step('missing or wrong token -> 401 with a Connect code', async () => {
    const none = await raw('/process.Process/List', { headers: H({ 'Content-Type': 'application/json' }), body: '{}' })
    assert.equal(none.status, 401)
    assert.equal(none.json.code, 'unauthenticated')
    const wrong = await raw('/process.Process/List', {
      headers: H({ 'Content-Type': 'application/json', 'X-Access-Token': id + '.1.00' }), body: '{}' })
    assert.equal(wrong.status, 401)
    const files = await raw('/files?path=/etc/hostname', { method: 'GET', headers: H({ 'X-Access-Token': 'bogus' }) })
    assert.equal(files.status, 401)
    assert.equal(files.json.code, 401)
  })
  await step('token of another sandbox is refused', async () => {
    const other = killLater(await Sandbox.create('base', { timeoutMs: 120_000 }))
    const r = await raw('/process.Process/List', {
      headers: H({ 'Content-Type': 'application/json', 'X-Access-Token': other.envdAccessToken }), body: '{}' })
    assert.equal(r.status, 401)
    await other.kill()
  })
  await step('unary: wrong content type -> 415, bad JSON -> 400 invalid_argument', async () => {
    const ct = await raw('/process.Process/List', { headers: H({ 'Content-Type': 'text/plain', 'X-Access-Token': token }), body: '{}' })
    assert.equal(ct.status, 415)
    assert.equal(typeof ct.json.code, 'string')
    const bad = await raw('/filesystem.Filesystem/Stat', { headers: H({ 'Content-Type': 'application/json', 'X-Access-Token': token }), body: '{"path":' })
    assert.equal(bad.status, 400)
    assert.equal(bad.json.code, 'invalid_argument')
    const typ = await raw('/filesystem.Filesystem/Stat', { headers: H({ 'Content-Type': 'application/json', 'X-Access-Token': token }), body: '{"path":7}' })
    assert.equal(typ.json.code, 'invalid_argument')
    const unk = await raw('/process.Process/Nope', { headers: H({ 'Content-Type': 'application/json', 'X-Access-Token': token }), body: '{}' })
    assert.equal(unk.json.code, 'unimplemented')
  })
  await step('streams: malformed envelopes end with an error trailer', async () => {
    for (const body of [
      Buffer.from([0, 0, 0]),                                    // truncated header
      envelope(0, '{"process":'),                                // bad JSON
      envelope(1, '{}'),                                         // compressed flag
      Buffer.concat([envelope(0, '{}'), Buffer.from('x')]),      // trailing bytes
      envelope(0, '{"process":{"cmd":""}}'),                     // missing cmd
    ]) {
      const r = await stream('/process.Process/Start', body)
      assert.equal(r.status, 200)
      assert.match(r.ctype, /application\/connect\+json/)
      const last = r.frames.at(-1)
      assert.equal(last.flags, 2)
      assert.equal(last.json.error.code, 'invalid_argument')
    }
  })
  await step('streams: oversized frame is refused without reading it', async () => {
    const b = Buffer.alloc(5)
    b.writeUInt32BE(0x7fffffff, 1)
    const r = await fetch(process.env.E2B_SANDBOX_URL + '/process.Process/Start', { method: 'POST', body: b,
      headers: H({ 'Content-Type': 'application/connect+json', 'X-Access-Token': token }) })
    assert.ok(r.status === 200 || r.status === 413, `status ${r.status}`)
    await r.arrayBuffer()
  })
  await step('streams: errors of the method arrive in the trailer', async () => {
    const r = await stream('/process.Process/Connect', envelope(0, '{"process":{"pid":4000000}}'))
    assert.equal(r.status, 200)
    assert.equal(r.frames.at(-1).json.error.code, 'not_found')
    const w = await stream('/filesystem.Filesystem/WatchDir', envelope(0, '{"path":"/no/such/dir"}'))
    assert.equal(w.frames.at(-1).json.error.code, 'not_found')
  })
  await step('a raw Start stream has start, data, end, trailer in order', async () => {
    const r = await stream('/process.Process/Start',
      envelope(0, JSON.stringify({ process: { cmd: '/bin/sh', args: ['-c', 'echo hi'] }, stdin: false })))
    const kinds = r.frames.map((f) => f.flags === 2 ? 'trailer' : Object.keys(f.json.event)[0])
    assert.deepEqual(kinds.filter((k) => k !== 'keepalive'), ['start', 'data', 'end', 'trailer'])
    assert.equal(Buffer.from(r.frames[1].json.event.data.stdout, 'base64').toString(), 'hi\n')
    assert.deepEqual(r.frames.at(-1).json, {})
  })
  await step('the sandbox still works', async () => {
    assert.equal((await sbx.commands.run('echo alive')).stdout, 'alive\n')
  })
})
