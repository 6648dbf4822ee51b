// Forks and snapshots through the SDK (2.51: Sandbox.fork, createSnapshot, listSnapshots,
// deleteSnapshot, Sandbox.create from a snapshot id): memory, processes and files carried
// over, each fork its own sandbox, a snapshot outliving its sandbox, errors.
import { assert, sdk, Sandbox, step, main, killLater, rejectsWith, raw, apiKey } from './lib.mjs'

await main(async () => {
  let a, forks, snap
  await step('a sandbox with a running process and a file', async () => {
    a = killLater(await Sandbox.create('base', { timeoutMs: 300_000 }))
    await a.commands.run('echo from-parent > ~/f')
    await a.commands.run('sleep 1000', { background: true })
  })
  await step('fork of 2: files and processes carried over, own identity', async () => {
    forks = await a.fork({ count: 2, timeoutMs: 120_000 })
    assert.equal(forks.length, 2)
    for (const f of forks) {
      assert.ok(f instanceof Sandbox, `fork failed: ${f && f.message}`)
      killLater(f)
      assert.notEqual(f.sandboxId, a.sandboxId)
      assert.equal((await f.commands.run('cat ~/f')).stdout, 'from-parent\n')
      assert.equal((await f.commands.run('grep -l "^sleep$" /proc/[0-9]*/comm >/dev/null 2>&1 && echo yes')).stdout, 'yes\n')
      assert.equal((await f.commands.run('hostname')).stdout.trim(), f.sandboxId)
      const info = await f.getInfo()
      assert.equal(info.state, 'running')
      assert.ok(info.endAt.getTime() - Date.now() < 130_000, 'the fork timeout applies')
    }
    await forks[0].commands.run('echo changed > ~/f')
    assert.equal((await a.commands.run('cat ~/f')).stdout, 'from-parent\n')
    assert.equal((await forks[1].commands.run('cat ~/f')).stdout, 'from-parent\n')
  })
  await step('fork: unknown sandbox and bad count', async () => {
    await rejectsWith(Sandbox.fork('sb0123456789abcdef', { count: 1 }), sdk.SandboxNotFoundError)
    const r = await raw(`/sandboxes/${a.sandboxId}/fork`, {
      headers: { 'X-API-KEY': apiKey, 'Content-Type': 'application/json' }, body: JSON.stringify({ count: 0 }),
    })
    assert.equal(r.status, 400)
    assert.equal(r.json.code, 400)
  })
  await step('createSnapshot, listSnapshots', async () => {
    snap = await a.createSnapshot({ name: 'e2b-snap' })
    assert.match(snap.snapshotId, /^sn[0-9a-f]{16}$/)
    assert.deepEqual(snap.names, ['e2b-snap'])
    const mine = await a.listSnapshots().nextItems()
    assert.deepEqual(mine.map((s) => s.snapshotId), [snap.snapshotId])
    const all = await Sandbox.listSnapshots().nextItems()
    assert.ok(all.some((s) => s.snapshotId === snap.snapshotId))
  })
  await step('the snapshot outlives its sandbox and creates a sandbox', async () => {
    await a.kill()
    const b = killLater(await Sandbox.create(snap.snapshotId, { timeoutMs: 300_000 }))
    assert.equal((await b.commands.run('cat ~/f')).stdout, 'from-parent\n')
    assert.equal((await b.commands.run('grep -l "^sleep$" /proc/[0-9]*/comm >/dev/null 2>&1 && echo yes')).stdout, 'yes\n')
  })
  await step('deleteSnapshot', async () => {
    assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), true)
    assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), false)
    assert.deepEqual((await Sandbox.listSnapshots().nextItems()).filter((s) => s.snapshotId === snap.snapshotId), [])
  })
})
