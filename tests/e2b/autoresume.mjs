// Auto-resume through the SDK (lifecycle: {onTimeout: 'pause', autoResume: true}): once
// paused, the sandbox's next command or file call wakes it without connect(), and
// getInfo reports the lifecycle; a sandbox created without autoResume stays paused and
// its calls fail as before.
import { assert, Sandbox, step, main, killLater } from './lib.mjs'

await main(async () => {
  let a, b
  await step('create with lifecycle autoResume; getInfo shows it', async () => {
    a = killLater(await Sandbox.create('base', {
      timeoutMs: 300_000, lifecycle: { onTimeout: 'pause', autoResume: true },
    }))
    const info = await a.getInfo()
    assert.deepEqual(info.lifecycle, { onTimeout: 'pause', autoResume: true })
  })
  await step('paused, then a command runs without connect()', async () => {
    await a.commands.run('echo before > /tmp/ar')
    assert.equal(await a.pause(), true)
    assert.equal((await a.getInfo()).state, 'paused')
    const r = await a.commands.run('cat /tmp/ar')
    assert.equal(r.stdout, 'before\n')
    assert.equal((await a.getInfo()).state, 'running')
  })
  await step('paused, then a file read wakes it', async () => {
    assert.equal(await a.pause(), true)
    assert.equal(await a.files.read('/tmp/ar'), 'before\n')
    assert.equal((await a.getInfo()).state, 'running')
  })
  await step('without autoResume a paused sandbox is not woken by a command', async () => {
    b = killLater(await Sandbox.create('base', { timeoutMs: 300_000 }))
    assert.equal(await b.pause(), true)
    let failed = false
    try {
      await b.commands.run('true')
    } catch (e) {
      failed = true
    }
    assert.ok(failed, 'the command should fail on a paused sandbox')
    assert.equal((await b.getInfo()).state, 'paused')
  })
})
