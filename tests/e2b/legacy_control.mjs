// The control plane as the oldest 2.x generation uses it (e2b 2.5: POST /sandboxes,
// connect = POST /timeout, on 404 POST /resume, then GET /sandboxes/{id} for the
// token). That SDK has no E2B_SANDBOX_URL, so envd calls are not exercised here.
import { assert, Sandbox, step, main, killLater, runId } from './lib.mjs'

await main(async () => {
  let sbx
  await step('create (POST /sandboxes) with metadata', async () => {
    sbx = killLater(await Sandbox.create('base', { timeoutMs: 300_000, metadata: { run: runId } }))
    assert.match(sbx.sandboxId, /^sb[0-9a-f]{16}$/)
  })
  await step('getInfo and list', async () => {
    const info = await Sandbox.getInfo(sbx.sandboxId)
    assert.equal(info.templateId, 'base')
    assert.deepEqual(info.metadata, { run: runId })
    const items = await Sandbox.list({ query: { metadata: { run: runId } } }).nextItems()
    assert.deepEqual(items.map((s) => s.sandboxId), [sbx.sandboxId])
  })
  await step('setTimeout', async () => {
    await Sandbox.setTimeout(sbx.sandboxId, 200_000)
    const info = await Sandbox.getInfo(sbx.sandboxId)
    assert.ok(info.endAt.getTime() - Date.now() < 210_000)
  })
  await step('betaPause, then connect resumes through /resume', async () => {
    assert.equal(await Sandbox.betaPause(sbx.sandboxId), true)
    assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'paused')
    const c = await Sandbox.connect(sbx.sandboxId)
    assert.equal(c.sandboxId, sbx.sandboxId)
    assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'running')
  })
  await step('kill', async () => {
    assert.equal(await Sandbox.kill(sbx.sandboxId), true)
    assert.equal(await Sandbox.kill(sbx.sandboxId), false)
  })
})
