// Control-plane and envd error shapes that need no running VM: auth, unknown sandboxes,
// malformed RPC bodies. Run against any spaced (even one whose VMs cannot boot).
import { assert, sdk, Sandbox, step, main, rejectsWith, raw, apiKey, sdkVersion } from './lib.mjs'

const missing = 'sb00000000deadbeef'

await main(async () => {
  await step('unknown sandbox: connect -> SandboxNotFoundError / NotFoundError', async () => {
    await rejectsWith(Sandbox.connect(missing), sdk.NotFoundError ?? sdk.SandboxError)
  })
  await step('unknown sandbox: kill -> false', async () => {
    assert.equal(await Sandbox.kill(missing), false)
  })
  await step('unknown sandbox: getInfo -> error naming 404 / not found', async () => {
    // 2.5 raises a plain SandboxError("404: ..."), later versions NotFoundError.
    await rejectsWith(Sandbox.getInfo(missing), sdk.SandboxError, (e) => assert.match(e.message, /not found/i))
  })
  await step('bad API key -> AuthenticationError', async () => {
    const key = 'e2b_' + '0'.repeat(48)
    await rejectsWith(Sandbox.kill(missing, { apiKey: key }), sdk.AuthenticationError)
  })
  await step('list with metadata filter and state', async () => {
    const p = Sandbox.list({ query: { metadata: { 'no such': 'v&1' }, state: ['running', 'paused'] }, limit: 5 })
    const items = await p.nextItems()
    assert.deepEqual(items, [])
    assert.equal(p.hasNext, false)
  })
  await step('create with an unknown template fails with an error', async () => {
    await rejectsWith(Sandbox.create('no-such-template', { timeoutMs: 10000 }), sdk.SandboxError ?? Error)
  })
  await step('REST errors carry a numeric code', async () => {
    const r = await raw('/sandboxes/' + missing, { method: 'GET', headers: { 'X-API-KEY': apiKey } })
    assert.equal(r.status, 404)
    assert.equal(r.json.code, 404)
    const p = await raw('/sandboxes/' + missing + '/pause', { headers: { 'X-API-KEY': apiKey } })
    assert.equal(p.status, 404)
    assert.equal(p.json.code, 404)
    // The Python SDK also sends E2b-Sandbox-Id on control-plane calls.
    const l = await raw('/v2/sandboxes', { method: 'GET', headers: { 'X-API-KEY': apiKey, 'E2b-Sandbox-Id': missing } })
    assert.equal(l.status, 200)
    const u = await raw('/v2/sandboxes', { method: 'GET' })
    assert.equal(u.status, 401)
    assert.equal(u.json.code, 401)
  })
  await step('envd routes for an unknown sandbox answer 502', async () => {
    const h = await raw('/health', { method: 'GET', headers: { 'E2b-Sandbox-Id': missing } })
    assert.equal(h.status, 502)
    assert.equal(h.json.code, 502)
    const rpc = await raw('/process.Process/List', {
      headers: { 'E2b-Sandbox-Id': missing, 'Content-Type': 'application/json' }, body: '{}' })
    assert.equal(rpc.status, 502)
    assert.equal(rpc.json.code, 'unavailable')
    assert.match(rpc.headers.get('content-type'), /application\/json/)
    const f = await raw('/files?path=/etc/hostname', { method: 'GET', headers: { 'X-Access-Token': missing + '.1.2' } })
    assert.equal(f.status, 502)
  })
  console.log(`sdk ${sdkVersion}`)
})
