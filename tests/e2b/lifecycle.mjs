// Sandbox lifecycle through the SDK: create (template, timeout, metadata, envs), getInfo,
// list with filters, order and paging, getMetrics, setTimeout, isRunning, connect, pause/resume keeping id,
// token, files and running processes, kill.
import { assert, sdk, Sandbox, step, main, killLater, rejectsWith, runId, eventually, sdkVersion, raw, apiKey } from './lib.mjs'

await main(async () => {
  let a, b
  await step('create with template, timeout, metadata and envs', async () => {
    a = killLater(await Sandbox.create('base', {
      timeoutMs: 300_000, metadata: { run: runId, 'odd key': 'v&=1', n: '1' }, envs: { GREETING: 'hello e2b' },
    }))
    assert.match(a.sandboxId, /^sb[0-9a-f]{16}$/)
    b = killLater(await Sandbox.create('base', { timeoutMs: 300_000, metadata: { run: runId, n: '2' } }))
    assert.notEqual(a.sandboxId, b.sandboxId)
  })
  await step('sandbox-level envs reach commands', async () => {
    const r = await a.commands.run('echo "$GREETING"')
    assert.equal(r.stdout, 'hello e2b\n')
  })
  await step('getInfo', async () => {
    const info = await a.getInfo()
    assert.equal(info.sandboxId, a.sandboxId)
    assert.equal(info.templateId, 'base')
    assert.equal(info.state, 'running')
    assert.deepEqual(info.metadata, { run: runId, 'odd key': 'v&=1', n: '1' })
    assert.ok(info.endAt.getTime() - Date.now() > 200_000, 'endAt reflects the 300 s timeout')
    const byId = await Sandbox.getInfo(a.sandboxId)
    assert.deepEqual(byId.metadata, info.metadata)
    if (typeof Sandbox.getFullInfo === 'function') { // deprecated alias of the static getInfo
      assert.equal((await Sandbox.getFullInfo(a.sandboxId)).sandboxId, a.sandboxId)
    }
  })
  await step('list: metadata filter (encoded keys/values) and paging', async () => {
    const only = await Sandbox.list({ query: { metadata: { run: runId, 'odd key': 'v&=1' } } }).nextItems()
    assert.deepEqual(only.map((s) => s.sandboxId), [a.sandboxId])
    const p = Sandbox.list({ query: { metadata: { run: runId } }, limit: 1 })
    const page1 = await p.nextItems()
    assert.equal(page1.length, 1)
    assert.equal(p.hasNext, true)
    const page2 = await p.nextItems()
    assert.equal(page2.length, 1)
    assert.deepEqual(new Set([...page1, ...page2].map((s) => s.sandboxId)), new Set([a.sandboxId, b.sandboxId]))
    assert.equal(p.hasNext, false)
    assert.equal(page1[0].state, 'running')
    if (Number(sdkVersion.split('.')[1]) >= 40) { // startedAfter arrived in later 2.x SDKs
      const later = await Sandbox.list({ query: { metadata: { run: runId }, startedAfter: new Date(Date.now() + 3600_000) } }).nextItems()
      assert.deepEqual(later, [])
      const earlier = await Sandbox.list({ query: { metadata: { run: runId }, startedAfter: new Date(Date.now() - 3600_000) } }).nextItems()
      assert.equal(earlier.length, 2)
    }
  })
  await step('list: order by start time, asc and desc, paged', async () => {
    const ids = async (order, limit) => {
      const p = Sandbox.list({ query: { metadata: { run: runId } }, order, limit })
      const out = []
      while (p.hasNext) out.push(...(await p.nextItems()).map((s) => s.sandboxId))
      return out
    }
    const r = await raw(`/v2/sandboxes?order=desc&metadata=${encodeURIComponent(`run=${runId}`)}`,
      { method: 'GET', headers: { 'X-API-KEY': apiKey } })
    assert.equal(r.status, 200)
    assert.deepEqual(r.json.map((s) => s.sandboxID), [b.sandboxId, a.sandboxId])
    const bad = await raw('/v2/sandboxes?order=sideways', { method: 'GET', headers: { 'X-API-KEY': apiKey } })
    assert.equal(bad.status, 400)
    if (Number(sdkVersion.split('.')[1]) >= 51) { // the SDK passes `order` from 2.51 on
      assert.deepEqual(await ids('asc', 1), [a.sandboxId, b.sandboxId])
      assert.deepEqual(await ids('desc', 1), [b.sandboxId, a.sandboxId])
    }
  })
  await step('getMetrics: one real sample from the guest', async () => {
    await a.commands.run('i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done') // some CPU use
    const m = await a.getMetrics()
    assert.equal(m.length, 1)
    const s = m[0]
    assert.ok(s.cpuCount >= 1, JSON.stringify(s))
    assert.ok(s.cpuUsedPct > 0 && s.cpuUsedPct <= 100, JSON.stringify(s))
    assert.ok(s.memTotal > 100 << 20 && s.memUsed > 0 && s.memUsed < s.memTotal, JSON.stringify(s))
    assert.ok(s.diskTotal > 0 && s.diskUsed > 0 && s.diskUsed <= s.diskTotal, JSON.stringify(s))
    assert.ok(Math.abs(s.timestamp.getTime() - Date.now()) < 120_000)
    // A window in the past holds no sample (raw: SDKs before 2.51 do not pass start/end).
    const end = Math.floor(Date.now() / 1000) - 3600
    const past = await raw(`/sandboxes/${a.sandboxId}/metrics?start=${end - 60}&end=${end}`,
      { method: 'GET', headers: { 'X-API-KEY': apiKey } })
    assert.equal(past.status, 200)
    assert.deepEqual(past.json, [])
  })
  await step('setTimeout shortens and extends the deadline', async () => {
    await a.setTimeout(120_000)
    let info = await a.getInfo()
    assert.ok(info.endAt.getTime() - Date.now() < 130_000)
    await a.setTimeout(600_000)
    info = await a.getInfo()
    assert.ok(info.endAt.getTime() - Date.now() > 500_000)
  })
  await step('isRunning', async () => {
    assert.equal(await a.isRunning(), true)
  })
  let bg
  await step('pause keeps files and processes; a second pause returns false', async () => {
    await a.files.write('/home/user/before-pause.txt', 'kept')
    bg = await a.commands.run('sleep 3000', { background: true })
    // pause() is betaPause() before 2.2x; same route.
    const pause = () => (a.pause ? a.pause() : a.betaPause())
    assert.equal(await pause(), true)
    assert.equal(await a.isRunning(), false)
    const listed = await Sandbox.list({ query: { metadata: { run: runId, n: '1' }, state: ['paused'] } }).nextItems()
    assert.deepEqual(listed.map((s) => [s.sandboxId, s.state]), [[a.sandboxId, 'paused']])
    assert.equal(await pause(), false)
  })
  await step('connect resumes with the same id and token', async () => {
    const c = await Sandbox.connect(a.sandboxId)
    assert.equal(c.sandboxId, a.sandboxId)
    assert.equal(await c.isRunning(), true)
    assert.equal(await c.files.read('/home/user/before-pause.txt'), 'kept')
    const procs = await c.commands.list()
    assert.ok(procs.some((p) => p.pid === bg.pid), 'background process survived pause/resume')
    // The old handle (same token) works again too.
    assert.equal((await a.commands.run('echo again')).stdout, 'again\n')
    assert.equal(await c.commands.kill(bg.pid), true)
  })
  await step('connect to a running sandbox', async () => {
    const c = await Sandbox.connect(b.sandboxId)
    assert.equal((await c.commands.run('echo b')).stdout, 'b\n')
  })
  await step('kill, then kill again returns false and connect fails', async () => {
    assert.ok([true, undefined].includes(await b.kill())) // 2.7's instance kill() returns void
    assert.equal(await Sandbox.kill(b.sandboxId), false)
    await rejectsWith(Sandbox.connect(b.sandboxId), sdk.SandboxError)
    await eventually(async () => !(await Sandbox.list({ query: { metadata: { run: runId } } }).nextItems())
      .some((s) => s.sandboxId === b.sandboxId), 'killed sandbox to leave the list')
  })
})
